import CartStore
import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import Synchronization

/// The server's observer of the store: fans each committed event out to the subscribers.
///
/// An event is encoded once, on the store's writer thread right after the commit, and the
/// same bytes go to every subscriber that wants its cart: queued in its outbox while it is
/// still receiving its snapshot or backlog, written straight into its connection once it is
/// live (see `LoopBatcher`). A slow subscriber holds nobody up: when its outbox or its
/// connection's unsent bytes pass their bound it is closed as too slow.
final class FanoutHub: CartStoreObserver {
    struct Stats: Codable, Sendable, Equatable {
        var subscribers: Int
        var expiries: Int
        var slowConsumerDrops: Int
        var latestSeq: Int64
        var eventsFannedOut: Int
        var deliveries: Int
    }

    /// A subscription in the fan-out list: immutable, so fan-out reads it without a lock.
    struct Entry: Sendable {
        let subscriber: Subscriber
        /// Only events of these carts; `nil` for all.
        let carts: Set<String>?

        func wants(_ cartID: String) -> Bool { carts?.contains(cartID) ?? true }
    }

    private struct State {
        /// Every open connection, subscribed or not: what leases and shutdown act on.
        var connections: [String: Subscriber] = [:]
        /// The subscribed ones, dense, copied (by reference count) for each fan-out: changes
        /// during a fan-out apply from the next event.
        var fanout: [Entry] = []
        var slotByID: [String: Int] = [:]
        var shuttingDown = false

        mutating func removeFromFanout(_ id: String) {
            guard let index = slotByID.removeValue(forKey: id) else { return }
            let last = fanout.count - 1
            if index != last {
                fanout.swapAt(index, last)
                slotByID[fanout[index].subscriber.id] = index
            }
            fanout.removeLast()
        }
    }

    private let state = NIOLockedValueBox(State())
    /// One per event loop, made on first use (there are as many loops as cores).
    private let batchers = NIOLockedValueBox<[ObjectIdentifier: LoopBatcher]>([:])
    private let expiries = Synchronization.Atomic<Int>(0)
    private let slowDrops = Synchronization.Atomic<Int>(0)
    private let fannedOut = Synchronization.Atomic<Int>(0)
    private let deliveries = Synchronization.Atomic<Int>(0)
    private let latest: Synchronization.Atomic<Int64>
    /// How many subscribers each recent event was queued to, for the mutation responses.
    private let deliveredCounts = NIOLockedValueBox(DeliveredCounts(capacity: 4_096))
    let logger: Logger

    init(latestSeq: Int64, logger: Logger) {
        self.latest = Synchronization.Atomic(latestSeq)
        self.logger = logger
    }

    // MARK: Observer

    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        let frame = OutboundFrame(seq: event.seq, text: ServerEncoding.encode(.event(event)))
        let entries = state.withLockedValue { $0.fanout }
        let delivered = deliver(frame, to: entries.lazy.filter { $0.wants(event.cartID) })
        latest.store(event.seq, ordering: .releasing)
        fannedOut.add(1, ordering: .relaxed)
        deliveries.add(delivered, ordering: .relaxed)
        deliveredCounts.withLockedValue { $0.record(seq: event.seq, count: delivered) }
    }

    /// Hands a frame to each subscriber: queued for those still catching up, and for live
    /// ones, to the batcher of their event loop. Returns how many took it.
    private func deliver(_ frame: OutboundFrame, to entries: some Sequence<Entry>, waitForRoom: Bool = true) -> Int {
        var delivered = 0
        var batches: [ObjectIdentifier: (loop: any EventLoop, targets: [LiveTarget])] = [:]
        for entry in entries {
            let subscriber = entry.subscriber
            switch subscriber.outbox.admit(frame) {
            case .queued:
                delivered += 1
            case .live(let wire):
                batches[ObjectIdentifier(wire.eventLoop), default: (wire.eventLoop, [])].targets.append(LiveTarget(subscriber: subscriber, wire: wire))
                delivered += 1
            case .refused:
                if subscriber.outbox.closedReason == .tooSlow { drop(subscriber, because: .tooSlow) }
            }
        }
        guard !batches.isEmpty else { return delivered }
        let frameBytes = WireWriter.textFrame(frame.text)
        for batch in batches.values {
            batcher(for: batch.loop).submit(frameBytes, to: batch.targets, waitForRoom: waitForRoom)
        }
        return delivered
    }

    private func batcher(for loop: any EventLoop) -> LoopBatcher {
        batchers.withLockedValue { batchers in
            if let batcher = batchers[ObjectIdentifier(loop)] { return batcher }
            let batcher = LoopBatcher(loop: loop, hub: self)
            batchers[ObjectIdentifier(loop)] = batcher
            return batcher
        }
    }

    /// On the connection's event loop. A connection whose unsent bytes pass its high-water
    /// mark reads too slowly: it is dropped like an overflowing outbox. Returns whether the
    /// frame was written (it still needs a flush).
    func write(_ frameBytes: ByteBuffer, to target: LiveTarget) -> Bool {
        guard target.subscriber.outbox.closedReason == nil else { return false }
        guard target.wire.isWritable else {
            drop(target.subscriber, because: .tooSlow)
            return false
        }
        target.wire.write(frameBytes)
        return true
    }

    // MARK: Connections and subscriptions

    enum ConnectRefusal: Error {
        case shuttingDown
        case full
    }

    /// Registers a new connection, so that its lease is watched. It receives nothing until it
    /// subscribes.
    func connect(_ subscriber: Subscriber, maxConnections: Int) throws(ConnectRefusal) {
        let refusal: ConnectRefusal? = state.withLockedValue { state in
            guard !state.shuttingDown else { return .shuttingDown }
            guard state.connections.count < maxConnections else { return .full }
            state.connections[subscriber.id] = subscriber
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Starts fanning events out to `subscriber`.
    ///
    /// The `.start` item is queued and the subscription added under one lock, so every event
    /// is either committed before the writer reads the log for `.start`, or queued after it.
    func subscribe(_ subscriber: Subscriber, carts: Set<String>?, since: Int64?) {
        state.withLockedValue { state in
            guard state.connections[subscriber.id] != nil, state.slotByID[subscriber.id] == nil else { return }
            guard subscriber.outbox.enqueue(.start(since: since, carts: carts)) else { return }
            state.slotByID[subscriber.id] = state.fanout.count
            state.fanout.append(Entry(subscriber: subscriber, carts: carts))
        }
    }

    /// Forgets a connection. Harmless if it is already gone.
    func disconnect(_ subscriber: Subscriber) {
        state.withLockedValue { state in
            state.connections[subscriber.id] = nil
            state.removeFromFanout(subscriber.id)
        }
    }

    /// Closes a subscriber's outbox for `reason`, counts and logs it, and forgets it.
    func drop(_ subscriber: Subscriber, because reason: CloseReason) {
        subscriber.outbox.close(reason)
        let wasConnected = state.withLockedValue { state in
            defer {
                state.connections[subscriber.id] = nil
                state.removeFromFanout(subscriber.id)
            }
            return state.connections[subscriber.id] != nil
        }
        guard wasConnected else { return }
        switch reason {
        case .leaseExpired:
            expiries.add(1, ordering: .relaxed)
            logger.info("lease expired", metadata: ["fanout.subscriber.id": "\(subscriber.id)"])
        case .tooSlow:
            slowDrops.add(1, ordering: .relaxed)
            logger.info("slow consumer dropped", metadata: ["fanout.subscriber.id": "\(subscriber.id)"])
        case .shuttingDown, .connectionEnded:
            break
        }
    }

    /// Drops every connection whose lease lapsed. Returns how many.
    @discardableResult
    func expireLeases(ttl: Duration, now: ContinuousClock.Instant = .now) -> Int {
        let expired = state.withLockedValue { Array($0.connections.values) }.filter { $0.leaseExpired(ttl: ttl, now: now) }
        for subscriber in expired { drop(subscriber, because: .leaseExpired) }
        return expired.count
    }

    /// Sends a server heartbeat (encoded once) to every subscriber.
    func heartbeat() {
        let frame = OutboundFrame(seq: nil, text: ServerEncoding.encode(.heartbeat(latestSeq: latestSeq)))
        _ = deliver(frame, to: state.withLockedValue { $0.fanout }, waitForRoom: false)
    }

    /// Refuses new connections and closes the current ones as going away.
    func shutDown() {
        let connections = state.withLockedValue { state in
            state.shuttingDown = true
            return Array(state.connections.values)
        }
        for subscriber in connections { drop(subscriber, because: .shuttingDown) }
    }

    var isShuttingDown: Bool { state.withLockedValue { $0.shuttingDown } }

    // MARK: Figures

    var latestSeq: Int64 { latest.load(ordering: .acquiring) }

    var subscriberCount: Int { state.withLockedValue { $0.connections.count } }

    /// How many subscribers the event `seq` was queued to (0 if unknown or too old).
    func deliveredCount(seq: Int64) -> Int {
        deliveredCounts.withLockedValue { $0.count(seq: seq) }
    }

    var stats: Stats {
        Stats(
            subscribers: subscriberCount,
            expiries: expiries.load(ordering: .relaxed),
            slowConsumerDrops: slowDrops.load(ordering: .relaxed),
            latestSeq: latestSeq,
            eventsFannedOut: fannedOut.load(ordering: .relaxed),
            deliveries: deliveries.load(ordering: .relaxed))
    }
}

/// A live subscriber and where to write its frames.
struct LiveTarget: Sendable {
    let subscriber: Subscriber
    let wire: WireWriter
}

/// A fixed ring of (seq, count): bounded memory for the `deliveredTo` of recent events.
struct DeliveredCounts {
    private var seqs: [Int64]
    private var counts: [Int]

    init(capacity: Int) {
        seqs = Array(repeating: -1, count: capacity)
        counts = Array(repeating: 0, count: capacity)
    }

    mutating func record(seq: Int64, count: Int) {
        let slot = Int(seq % Int64(seqs.count))
        seqs[slot] = seq
        counts[slot] = count
    }

    func count(seq: Int64) -> Int {
        let slot = Int(seq % Int64(seqs.count))
        return seqs[slot] == seq ? counts[slot] : 0
    }
}

/// Encodes server messages for the wire.
enum ServerEncoding {
    private static let encoder = FanoutJSON.encoder()

    static func encode(_ message: ServerMessage) -> ByteBuffer {
        guard let data = try? encoder.encode(message) else {
            // Only non-finite numbers could fail, and the server sends none; never crash for it.
            return ByteBuffer(string: #"{"code":"internal_error","message":"unencodable message","type":"error"}"#)
        }
        return ByteBuffer(bytes: data)
    }
}

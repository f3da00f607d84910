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
/// still receiving its snapshot or backlog; once it is live, its event loop writes it from the
/// `LiveRing` (see `LoopFanout`). A slow subscriber holds nobody up: when its outbox
/// overflows, or it falls out of the ring, it is closed as too slow. Writers never wait.
final class FanoutHub: CartStoreObserver {
    struct Stats: Codable, Sendable, Equatable {
        var subscribers: Int
        /// Subscribed, caught up, and served by their event loops from the ring.
        var liveSubscribers: Int
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
        /// The subscriptions still catching up (snapshot or backlog), dense, copied (by
        /// reference count) for each event: changes during a fan-out apply from the next one.
        var fanout: [Entry] = []
        var slotByID: [String: Int] = [:]
        /// The live subscriptions, which their event loops serve from the ring: only counted
        /// per event (for `deliveredTo`), never walked. Their carts, by subscriber id.
        var live: [String: Set<String>?] = [:]
        var liveForAllCarts = 0
        var liveByCart: [String: Int] = [:]
        var shuttingDown = false

        func liveWanting(_ cartID: String) -> Int {
            liveForAllCarts + (liveByCart[cartID] ?? 0)
        }

        mutating func makeLive(_ id: String) {
            guard let index = slotByID[id] else { return }
            let carts = fanout[index].carts
            removeFromFanout(id)
            live[id] = carts
            if let carts {
                for cart in carts { liveByCart[cart, default: 0] += 1 }
            } else {
                liveForAllCarts += 1
            }
        }

        /// Removes a subscription, catching up or live.
        mutating func unsubscribe(_ id: String) {
            removeFromFanout(id)
            guard let carts = live.removeValue(forKey: id) else { return }
            guard let carts else {
                liveForAllCarts -= 1
                return
            }
            for cart in carts {
                let left = (liveByCart[cart] ?? 1) - 1
                liveByCart[cart] = left > 0 ? left : nil
            }
        }

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
    /// Recent events for live subscribers; its capacity is how far one may fall behind.
    let ring: LiveRing
    /// One per event loop, made on first use (there are as many loops as cores).
    private let loops = NIOLockedValueBox<[LoopFanout]>([])
    private let expiries = Synchronization.Atomic<Int>(0)
    private let slowDrops = Synchronization.Atomic<Int>(0)
    private let fannedOut = Synchronization.Atomic<Int>(0)
    private let deliveries = Synchronization.Atomic<Int>(0)
    private let latest: Synchronization.Atomic<Int64>
    /// How many subscribers each recent event was queued to, for the mutation responses.
    private let deliveredCounts = NIOLockedValueBox(DeliveredCounts(capacity: 4_096))
    let logger: Logger

    /// - Parameter lagLimit: how many events a live subscriber may fall behind before it is
    ///   dropped as too slow.
    init(latestSeq: Int64, lagLimit: Int = 1_024, logger: Logger) {
        self.ring = LiveRing(capacity: lagLimit)
        self.latest = Synchronization.Atomic(latestSeq)
        self.logger = logger
    }

    // MARK: Observer

    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        let frame = OutboundFrame(seq: event.seq, text: ServerEncoding.encode(.event(event)))
        // Into the ring first: a subscriber going live meanwhile finds it there.
        ring.append(.init(seq: event.seq, cartID: event.cartID, frame: WireWriter.textFrame(frame.text)))
        let (entries, live) = state.withLockedValue { ($0.fanout, $0.liveWanting(event.cartID)) }
        let delivered = live + admit(frame, to: entries.lazy.filter { $0.wants(event.cartID) })
        for loop in loops.withLockedValue({ $0 }) { loop.poke() }
        latest.store(event.seq, ordering: .releasing)
        fannedOut.add(1, ordering: .relaxed)
        deliveries.add(delivered, ordering: .relaxed)
        deliveredCounts.withLockedValue { $0.record(seq: event.seq, count: delivered) }
    }

    /// Queues a frame for each subscriber still catching up, and counts the live ones, which
    /// their event loops serve. Returns how many took it.
    private func admit(_ frame: OutboundFrame, to entries: some Sequence<Entry>) -> Int {
        var delivered = 0
        for entry in entries {
            switch entry.subscriber.outbox.admit(frame) {
            case .queued, .live:
                delivered += 1
            case .refused:
                if entry.subscriber.outbox.closedReason == .tooSlow { drop(entry.subscriber, because: .tooSlow) }
            }
        }
        return delivered
    }

    /// The fan-out of `loop`, made on first use.
    func fanout(for loop: any EventLoop) -> LoopFanout {
        loops.withLockedValue { loops in
            if let existing = loops.first(where: { $0.loop === loop }) { return existing }
            let fanout = LoopFanout(loop: loop, hub: self, ring: ring)
            loops.append(fanout)
            return fanout
        }
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
            guard state.connections[subscriber.id] != nil, state.slotByID[subscriber.id] == nil, state.live[subscriber.id] == nil else { return }
            guard subscriber.outbox.enqueue(.start(since: since, carts: carts)) else { return }
            state.slotByID[subscriber.id] = state.fanout.count
            state.fanout.append(Entry(subscriber: subscriber, carts: carts))
        }
    }

    /// Switches a subscriber whose writer has sent everything queued to live delivery
    /// (`Outbox.goLive`); false when more arrived meanwhile, to be sent first. Its event loop's
    /// `LoopFanout` then serves it from the ring, and events no longer walk it.
    func goLive(_ subscriber: Subscriber) -> Bool {
        guard subscriber.outbox.goLive() else { return false }
        // Until this, events still reach it here, where the outbox answers `.live` and it is
        // counted; from here on it is counted without a walk. One lock: never both.
        state.withLockedValue { $0.makeLive(subscriber.id) }
        return true
    }

    /// Forgets a connection. Harmless if it is already gone.
    func disconnect(_ subscriber: Subscriber) {
        state.withLockedValue { state in
            state.connections[subscriber.id] = nil
            state.unsubscribe(subscriber.id)
        }
    }

    /// Closes a subscriber's outbox for `reason`, counts and logs it, and forgets it.
    func drop(_ subscriber: Subscriber, because reason: CloseReason) {
        // Forgotten before its outbox closes: closing it closes the connection, which may
        // `disconnect` it before this counts it.
        let wasConnected = state.withLockedValue { state in
            defer {
                state.connections[subscriber.id] = nil
                state.unsubscribe(subscriber.id)
            }
            return state.connections[subscriber.id] != nil
        }
        subscriber.outbox.close(reason)
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
        _ = admit(frame, to: state.withLockedValue { $0.fanout })
        let wireFrame = WireWriter.textFrame(frame.text)
        for loop in loops.withLockedValue({ $0 }) { loop.broadcast(wireFrame) }
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
            liveSubscribers: state.withLockedValue { $0.live.count },
            expiries: expiries.load(ordering: .relaxed),
            slowConsumerDrops: slowDrops.load(ordering: .relaxed),
            latestSeq: latestSeq,
            eventsFannedOut: fannedOut.load(ordering: .relaxed),
            deliveries: deliveries.load(ordering: .relaxed))
    }
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

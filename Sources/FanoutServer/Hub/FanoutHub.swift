import CartStore
import FanoutConcurrency
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// The server's observer of the store: it fans each committed event out to the subscribers.
///
/// Per commit, where the store delivers it (SQLite's writer; PostgreSQL's follower), it does a constant amount of work however many
/// subscribers there are: the event becomes bytes once (`EventBytes`), goes into the
/// `LiveRing`, each event loop is poked to run a pass over its live subscribers (`LoopFanout`),
/// and the subscribers that want the event are counted, not walked, for `deliveredTo`.
/// Subscribers still catching up read the log, then join the ring (`Subscriber+CatchUp.swift`).
/// Writers never wait for a subscriber.
///
/// It also keeps the registry every subscriber is in from `connect` until `Subscriber.end`, for
/// the connection limit, shutdown, and `/stats`.
final class FanoutHub: CartStoreObserver {
    struct Settings: Sendable {
        /// How long a subscriber may show no sign of life.
        var leaseTTL: TimeAmount = .seconds(15)
        /// How many recent events the ring holds: how far a live subscriber may fall behind.
        var ringCapacity = 1_024
        var maxSubscribers = 10_000
        /// Events per log read while catching up: at most this many wait in one connection.
        var catchUpPageSize = 500
        /// What the members of one cart, and of one user, may do.
        var presence = PresenceRegistry.Limits()
    }

    struct Stats: Codable, Sendable, Equatable {
        var subscribers: Int
        /// Subscribed, caught up, and served by their event loops from the ring.
        var liveSubscribers: Int
        var expiries: Int
        var slowConsumerDrops: Int
        var latestSeq: Int64
        var eventsFannedOut: Int
        var deliveries: Int
        /// Subscribers ended, by reason (`EndReason.name`).
        var ended: [String: Int]
        /// The same, by transport (`websocket`, `sse`).
        var transports: [String: TransportStats]
        /// `GET /events?wait=S` requests waiting now.
        var waitingPolls: Int
        /// Subscriber connections open now: the subscribers, and ended ones whose connection
        /// is still closing (for a few seconds at most).
        var connections: Int
        /// Changes queued for the store's writer now (`CartStore.waitingChanges`).
        var waitingChanges: Int
        /// The store's engine: `sqlite` or `postgresql`.
        var engine: String
        /// How many committed events this server has not yet delivered (the database's newest
        /// seq minus `latestSeq`; with PostgreSQL, other servers' commits on their way here).
        /// Absent when the database could not be read.
        var behindBy: Int64?
        /// The newest failure of the database, naming where it is (`CartStore.lastProblem`):
        /// the operator's, as callers' errors say only "the database". Absent when none.
        var storeProblem: StoreProblemStats?
    }

    /// `CartStore.lastProblem` in `/stats`.
    struct StoreProblemStats: Codable, Sendable, Equatable {
        var message: String
        /// When, in milliseconds since 1970.
        var at: Int64
    }

    /// The phases a subscriber is counted in before it ends.
    enum CountedPhase: Int, CaseIterable, Sendable {
        case connected, catchingUp, live

        init?(_ phase: Subscriber.Phase) {
            switch phase {
            case .connected: self = .connected
            case .catchingUp: self = .catchingUp
            case .live: self = .live
            case .ended: return nil
            }
        }
    }

    /// The hub's counts: subscribers now by transport and phase, ended by transport and reason,
    /// events fanned out and deliveries.
    struct Figures: Sendable, Equatable {
        /// By `WireFraming.rawValue`, then `CountedPhase.rawValue`.
        var now = WireFraming.allCases.map { _ in CountedPhase.allCases.map { _ in 0 } }
        /// By `WireFraming.rawValue`, then `EndReason.name`.
        var ended = WireFraming.allCases.map { _ in [String: Int]() }
        var eventsFannedOut = 0
        var deliveries = 0

        func subscribers(_ framing: WireFraming? = nil, in phase: CountedPhase? = nil) -> Int {
            let transports = framing.map { [now[$0.rawValue]] } ?? now
            return transports.reduce(0) { total, phases in total + (phase.map { phases[$0.rawValue] } ?? phases.reduce(0, +)) }
        }

        mutating func enter(_ phase: CountedPhase, _ framing: WireFraming) {
            now[framing.rawValue][phase.rawValue] += 1
        }

        mutating func move(_ framing: WireFraming, from old: CountedPhase, to new: CountedPhase) {
            now[framing.rawValue][old.rawValue] -= 1
            now[framing.rawValue][new.rawValue] += 1
        }

        mutating func end(_ framing: WireFraming, wasIn phase: CountedPhase?, because reason: EndReason) {
            if let phase { now[framing.rawValue][phase.rawValue] -= 1 }
            ended[framing.rawValue][reason.name, default: 0] += 1
        }
    }

    struct TransportStats: Codable, Sendable, Equatable {
        var subscribers: Int
        var ended: [String: Int]
    }

    /// Every subscriber from `connect` to its end, and who wants which cart.
    private struct Registry {
        var subscribers: [ObjectIdentifier: Subscriber] = [:]
        var shuttingDown = false
        /// Subscribed (catching up or live), counted per cart and for all carts.
        var forAllCarts = 0
        var byCart: [String: Int] = [:]
        /// The one count of subscribers: now, by transport and phase, and ended, by transport and
        /// reason. `/stats` and `/metrics` are both views of it (`figures`).
        var figures = Figures()

        func wanting(_ cartID: String) -> Int { forAllCarts + (byCart[cartID] ?? 0) }

        mutating func count(_ carts: Set<String>?, by change: Int) {
            guard let carts else {
                forAllCarts += change
                return
            }
            for cart in carts {
                let count = (byCart[cart] ?? 0) + change
                byCart[cart] = count > 0 ? count : nil
            }
        }
    }

    let store: CartStore
    let settings: Settings
    let ring: LiveRing
    /// `GET /events?wait=S` requests waiting for a commit.
    let longPolls: CommitWaiters
    /// Subscribers whose catch-up has read the log further than this server has delivered
    /// (with PostgreSQL: resuming with a `since` from a server further along), waiting for the
    /// ring to reach them. At most one per subscriber.
    let aheadOfRing: CommitWaiters
    let logger: Logger
    /// Who is on which cart (`Presence/`).
    let presence: PresenceRegistry
    private let registry = NIOLockedValueBox(Registry())
    /// One per event loop, made on first use (there are as many loops as cores).
    private let loops = NIOLockedValueBox<[LoopFanout]>([])
    private let fannedOut = Synchronization.Atomic<Int>(0)
    private let deliveries = Synchronization.Atomic<Int>(0)
    /// Subscriber connections not yet closed, ended or not: shutdown waits for their close
    /// handshakes, so that every close frame reaches its client before the process exits.
    private let openConnections = OpenCount()
    private let latest: Synchronization.Atomic<Int64>
    /// How many subscribers each recent event was for, for the mutation responses.
    private let deliveredCounts = NIOLockedValueBox(DeliveredCounts(capacity: 4_096))

    init(
        store: CartStore, latestSeq: Int64, settings: Settings = .init(), presenceSharing: (any PresenceSharing)? = nil,
        logger: Logger
    ) {
        self.store = store
        self.presence = PresenceRegistry(limits: settings.presence, sharing: presenceSharing)
        self.settings = settings
        self.ring = LiveRing(capacity: settings.ringCapacity, latestSeq: latestSeq)
        self.longPolls = CommitWaiters(limit: settings.maxSubscribers, latestSeq: latestSeq)
        self.aheadOfRing = CommitWaiters(limit: settings.maxSubscribers, latestSeq: latestSeq)
        self.latest = Synchronization.Atomic(latestSeq)
        self.logger = logger
    }

    // MARK: Observer

    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        // Into the ring first: a subscriber joining meanwhile finds it there. One the ring
        // refuses was committed before this hub started: it is in the seq the hub began from.
        guard ring.append(EventBytes(event)) else { return }
        latest.store(event.seq, ordering: .releasing)
        for loop in loops.withLockedValue({ $0 }) { loop.poke() }
        longPolls.committed(seq: event.seq)
        aheadOfRing.committed(seq: event.seq)
        let delivered = registry.withLockedValue { $0.wanting(event.cartID) }
        fannedOut.add(1, ordering: .relaxed)
        deliveries.add(delivered, ordering: .relaxed)
        deliveredCounts.withLockedValue { $0.record(seq: event.seq, count: delivered) }
    }

    /// The live fan-out of `loop`, made on first use.
    func fanout(for loop: any EventLoop) -> LoopFanout {
        loops.withLockedValue { loops in
            if let existing = loops.first(where: { $0.loop === loop }) { return existing }
            let fanout = LoopFanout(loop: loop, ring: ring)
            loops.append(fanout)
            return fanout
        }
    }

    // MARK: Subscribers' lives

    /// Registers a new subscriber and starts its lease, on its loop; a refused one is ended
    /// (`.serverFull` or `.shuttingDown`), and false returned.
    @discardableResult
    func connect(_ subscriber: Subscriber) -> Bool {
        // Read before the registry's lock, never under it (the waiters have a lock of their own).
        let waiting = longPolls.count
        let refusal: EndReason? = registry.withLockedValue { registry in
            guard !registry.shuttingDown else { return .shuttingDown }
            guard registry.subscribers.count + waiting < settings.maxSubscribers else { return .serverFull }
            registry.subscribers[ObjectIdentifier(subscriber)] = subscriber
            registry.figures.enter(.connected, subscriber.framing)
            return nil
        }
        if let refusal {
            subscriber.end(refusal)
            return false
        }
        subscriber.startLease()
        subscriber.startExpiry()
        return true
    }

    /// It subscribed: events for its carts count it from now on.
    func subscribed(_ subscriber: Subscriber) {
        registry.withLockedValue { registry in
            registry.count(subscriber.carts, by: 1)
            registry.figures.move(subscriber.framing, from: .connected, to: .catchingUp)
        }
    }

    func wentLive(_ subscriber: Subscriber) {
        registry.withLockedValue { $0.figures.move(subscriber.framing, from: .catchingUp, to: .live) }
    }

    /// Called by `Subscriber.end` only: forgets it everywhere and counts why it ended.
    func forget(_ subscriber: Subscriber, wasIn phase: Subscriber.Phase, because reason: EndReason) {
        registry.withLockedValue { registry in
            // A refused subscriber was never registered: it only counts as ended.
            let registered = registry.subscribers.removeValue(forKey: ObjectIdentifier(subscriber)) != nil
            registry.figures.end(subscriber.framing, wasIn: registered ? FanoutHub.CountedPhase(phase) : nil, because: reason)
            if phase == .catchingUp || phase == .live { registry.count(subscriber.carts, by: -1) }
        }
        switch reason {
        case .leaseExpired: logger.withSubscriber(subscriber.id).info("lease expired")
        case .tooSlow: logger.withSubscriber(subscriber.id).info("slow subscriber dropped")
        case .tokenExpired: logger.withSubscriber(subscriber.id).info("token expired")
        case .failed: logger.withSubscriber(subscriber.id).warning("subscriber ended by a server failure")
        default: logger.withSubscriber(subscriber.id).debug("subscriber ended", metadata: ["fanout.reason": "\(reason.name)"])
        }
    }

    /// Refuses new subscribers and ends the current ones as shutting down.
    func shutDown() {
        longPolls.shutDown()
        aheadOfRing.shutDown()
        let subscribers = registry.withLockedValue { registry in
            registry.shuttingDown = true
            return Array(registry.subscribers.values)
        }
        for subscriber in subscribers { subscriber.end(.shuttingDown) }
    }

    var isShuttingDown: Bool { registry.withLockedValue { $0.shuttingDown } }

    /// A transport's connection opened or closed (its channel went inactive).
    func connectionOpened() { openConnections.opened() }
    func connectionClosed() { openConnections.closed() }

    /// After `shutDown`: waits until every subscriber connection has closed, or `limit` passed.
    func waitForConnectionsToClose(within limit: Duration) async {
        await openConnections.waitForNone(until: .now + limit)
    }

    /// Sends every live subscriber of `slice` (of `HeartbeatSlices.count`; every one when nil)
    /// that has everything a heartbeat saying so (encoded once).
    func heartbeat(slice: Int? = nil) {
        let latestSeq = self.latestSeq
        let frames = WireFraming.frameForAll(ServerEncoding.message(.heartbeat(latestSeq: latestSeq)))
        for fanout in loops.withLockedValue({ $0 }) {
            fanout.loop.execute { fanout.heartbeat(latestSeq: latestSeq, frames: frames, slice: slice) }
        }
    }

    // MARK: Figures

    var latestSeq: Int64 { latest.load(ordering: .acquiring) }

    var subscriberCount: Int { registry.withLockedValue { $0.subscribers.count } }

    /// Whether one more subscriber or waiting long-poll fits: both hold a connection for long,
    /// and together they may take `maxSubscribers` (with an open-files limit, the connections
    /// left once those kept for requests are set aside: `OpenFilesLimit.requestRoom`).
    var hasRoomForOneMore: Bool { subscriberCount + longPolls.count < settings.maxSubscribers }

    var maxSubscribers: Int { settings.maxSubscribers }

    /// How many subscribers the event `seq` was for (0 if unknown or too old).
    func deliveredCount(seq: Int64) -> Int {
        deliveredCounts.withLockedValue { $0.count(seq: seq) }
    }

    /// The hub's counts, as they are now: what `/stats` and `/metrics` show.
    var figures: Figures {
        var figures = registry.withLockedValue { $0.figures }
        figures.eventsFannedOut = fannedOut.load(ordering: .relaxed)
        figures.deliveries = deliveries.load(ordering: .relaxed)
        return figures
    }

    var stats: Stats {
        let figures = self.figures
        func everyReason(_ counts: [String: Int]) -> [String: Int] {
            Dictionary(uniqueKeysWithValues: EndReason.names.map { ($0, counts[$0] ?? 0) })
        }
        let allEnded = everyReason(figures.ended.reduce(into: [:]) { all, counts in all.merge(counts, uniquingKeysWith: +) })
        return Stats(
            subscribers: figures.subscribers(),
            liveSubscribers: figures.subscribers(in: .live),
            expiries: allEnded[EndReason.leaseExpired.name] ?? 0,
            slowConsumerDrops: allEnded[EndReason.tooSlow.name] ?? 0,
            latestSeq: latestSeq,
            eventsFannedOut: figures.eventsFannedOut,
            deliveries: figures.deliveries,
            ended: allEnded,
            transports: Dictionary(
                uniqueKeysWithValues: WireFraming.allCases.map { framing in
                    (
                        framing.metricLabel,
                        TransportStats(
                            subscribers: figures.subscribers(framing), ended: everyReason(figures.ended[framing.rawValue]))
                    )
                }),
            waitingPolls: longPolls.count,
            connections: openConnections.value,
            waitingChanges: store.waitingChanges,
            engine: store.engineName,
            behindBy: nil,
            storeProblem: store.lastProblem.map { StoreProblemStats(message: $0.message, at: $0.at) })
    }

    /// `stats`, with `behindBy` read from the database.
    func statsWithLag() async -> Stats {
        var stats = self.stats
        stats.behindBy = await behindBy(delivered: stats.latestSeq)
        return stats
    }

    /// How many committed events this server has not yet delivered (the database's newest seq
    /// minus `delivered`, by default the hub's); nil when the database could not be read.
    func behindBy(delivered: Int64? = nil) async -> Int64? {
        let delivered = delivered ?? latestSeq
        return (try? await store.latestSeq()).map { max(0, $0 - delivered) }
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

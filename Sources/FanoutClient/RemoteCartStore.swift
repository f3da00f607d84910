import Dispatch
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import WeakObservers

/// The carts of a fanout-server, kept live in this process and observed exactly like a local
/// `CartStore`: typed observers held weakly, each on its own queue, told the current state when
/// added, then every event of its carts once, in seq order.
///
/// The store holds one subscription to the server (WebSocket, or Server-Sent Events) for the
/// carts its living observers want, and only while some observer lives: the first observer
/// opens it, and when the last is released (no remove call needed) it closes within
/// `releaseCheckInterval` plus a moment, so the server sees the subscriber leave. It applies
/// the snapshot, then events, each once (a cart's `version` is the key: an event is applied
/// only if it is the cart's next version), and after any disconnect resumes from the last
/// applied seq. When the server cannot resume it (pruned history, another database), the
/// replica is replaced by the snapshot and observers get `didResync` with the reason.
///
/// When observers ask for carts the replica does not hold, the store reads their current state
/// over HTTP and resubscribes (a new connection, resumed from the replica's seq): carts that
/// stay observed lose and repeat nothing.
public final class RemoteCartStore: CartSource, CartWriter {
    /// The connection to the server, as observers are told of it (`CartConnectionState`,
    /// shared with `CartStore`).
    public typealias ConnectionState = CartConnectionState

    /// The server's HTTP API: typed writes (`addItem`, `setQuantity`, `removeItem`, `clear`)
    /// and reads of the carts as they are on the server.
    public let server: CartServerAPI
    /// The observers, held weakly.
    public let observers: Observers
    /// How often released observers are looked for: the bound on how long a connection (or a
    /// cart's events) outlives the last observer that wanted it.
    public let releaseCheckInterval: Duration

    /// The key of this store's member in the presence of its carts (made once, kept for every
    /// connection, so a reconnect takes the membership over); nil for a store without presence.
    public let presenceKey: String?

    package let replica = Replica()
    private let subscription: FanoutSubscription
    private let presenceStates: PresenceStates?
    /// Wakes the task that sends pending writes (at most one wake-up waits).
    private let sendPending: AsyncStream<Void>.Continuation
    private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])
    /// Opens the cache file (`Replica.restore`); nil without one. The subscription and every
    /// write wait for it.
    private let opening: Task<Void, Never>?
    /// The store's own waits are measured on it (see `init`).
    private let clock: any Clock<Duration>
    #if canImport(Network)
        /// Retries at once when the device's network comes back (`retryNow`).
        private let networkPath: NetworkPathWatch
    #endif

    /// - Parameters:
    ///   - server: `http://host:port` (or `https://`) of the fanout-server.
    ///   - transport: WebSocket (the default), or Server-Sent Events where a WebSocket cannot pass.
    ///   - credentials: the token, or how to get a fresh one before each connection.
    ///   - trust: for `https://`, the certificate authorities to trust: the system's, or the
    ///     app's own (`ServerTrust.certificates(pemFile:)`).
    ///   - releaseCheckInterval: how often released observers are looked for (0.5 s: a released
    ///     observer's store leaves its carts' presence within a second).
    ///   - cacheFile: a file to keep the replica in between runs (SQLite; made if missing):
    ///     the carts followed and their seq, the server database's identity, and the writes not
    ///     yet confirmed. It is opened and read off the caller's thread (the store connects,
    ///     and takes writes, once it is: `cacheFileOpened()`); restored from it, observers get
    ///     the carts before any network (`didLoadFromCache`) and the store resumes after their
    ///     seq; a file of another server or database, or one that cannot be read, is started
    ///     anew (`cacheState` says why).
    ///   - pendingWriteLifetime: how long a write may wait for the server: one not confirmed by
    ///     then is rejected with `RemoteStoreError.pendingWriteExpired` (rolled back,
    ///     `didReject`) instead of being sent again. 23 hours: inside the server's default
    ///     `--idempotency-keys-ttl` (24 h), past which a repeat could no longer be told apart.
    ///   - presence: to be present on the carts the observers follow, and to follow who else is
    ///     (`CartObserver.cartSource(_:didChangePresence:of:change:)`); nil: neither.
    public convenience init(
        server: URL, transport: FanoutSubscription.Transport = .webSocket, credentials: Credentials = .none, trust: ServerTrust = .system,
        releaseCheckInterval: Duration = .milliseconds(500), cacheFile: URL? = nil, pendingWriteLifetime: Duration = .seconds(23 * 3_600),
        presence: Presence? = nil
    ) {
        self.init(
            server: server, transport: transport, credentials: credentials, trust: trust, releaseCheckInterval: releaseCheckInterval,
            cacheFile: cacheFile,
            pendingWriteLifetime: pendingWriteLifetime, presence: presence, clock: ContinuousClock())
    }

    /// The store, its own waits measured on `clock`: the release check, the pause before the
    /// subscription tries again, the pause before a write is sent again. Tests pass a clock
    /// they advance; heartbeats keep wall time (the server's lease does).
    package init(
        server: URL, transport: FanoutSubscription.Transport = .webSocket, credentials: Credentials = .none, trust: ServerTrust = .system,
        releaseCheckInterval: Duration = .milliseconds(500), cacheFile: URL? = nil, pendingWriteLifetime: Duration = .seconds(23 * 3_600),
        presence: Presence? = nil, clock: any Clock<Duration>
    ) {
        presenceKey = presence?.key
        self.clock = clock
        let presenceStates = presence.map { PresenceStates($0.state) }
        self.presenceStates = presenceStates
        replica.state.presence.wanted = presence != nil
        self.server = CartServerAPI(baseURL: server, credentials: credentials, trust: trust)
        subscription = FanoutSubscription(server: server, transport: transport, credentials: credentials, trust: trust)
        self.releaseCheckInterval = releaseCheckInterval
        let (wakeUps, sendPending) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.sendPending = sendPending
        let observers = Observers(replica: replica)
        self.observers = observers
        let replica = replica
        let opening = cacheFile.map { cacheFile in
            replica.openedCache = .opening
            return Task {
                if await replica.restore(from: cacheFile, server: server, observers: observers) { sendPending.yield() }
            }
        }
        self.opening = opening
        replica.store.withLockedValue { $0 = WeakStore(store: self) }
        let subscription = subscription
        let api = self.server
        let presenceKey = presenceKey
        let run = Task<Void, Never> {
            await opening?.value
            _ = try? await subscription.run(
                plan: {
                    guard var plan = try await replica.plan(for: observers, api: api) else { return nil }
                    // Presence needs the carts named: following every cart, the store goes without.
                    if let presenceKey, let presenceStates, plan.carts != nil {
                        plan.presence = PresenceRequest(key: presenceKey, state: presenceStates.state)
                    }
                    return plan
                },
                wakeUps: replica.wakeUps, presenceStates: presenceStates, clock: clock,
                handle: { update in
                    try replica.take(update, observers: observers)
                    // An observer without a queue far behind (`DeferredCalls.limit` calls): the
                    // connection waits for it, as it would have if it had been called at once.
                    await replica.calls.room()
                })
        }
        let send = Task<Void, Never> {
            for await _ in wakeUps {
                await Self.sendPendingWrites(
                    replica: replica, api: api, observers: observers, lifetime: pendingWriteLifetime, clock: clock)
            }
        }
        let sweep = Task {
            while !Task.isCancelled {
                try? await clock.sleep(for: releaseCheckInterval)
                replica.reconsider(observers)
            }
        }
        tasks.withLockedValue { $0 = [run, sweep, send] + (opening.map { [$0] } ?? []) }
        #if canImport(Network)
            networkPath = NetworkPathWatch { [replica] in replica.retryNow() }
        #endif
    }

    /// Released, the store stops as `close()` does, without telling its observers: a store
    /// nobody holds has nobody to tell (its observers may outlive it; they get no more
    /// callbacks).
    deinit {
        for task in tasks.withLockedValue({ $0 }) { task.cancel() }
        sendPending.finish()
        #if canImport(Network)
            networkPath.cancel()
        #endif
    }

    /// Closes the store: every observer is told `ConnectionState.closed` (on its queue, its last
    /// callback), the connection is closed (the server sees the subscriber leave) by the time
    /// this returns, and nothing more is applied or told. Later calls do nothing; an observer
    /// added afterwards gets no callback.
    public func close() async {
        #if canImport(Network)
            networkPath.cancel()
        #endif
        replica.close(observers: observers)
        let tasks = self.tasks.withLockedValue { $0 }
        for task in tasks { task.cancel() }
        sendPending.finish()
        for task in tasks { await task.value }
        // What the replica's changes queued for the file: written by the time this returns.
        await replica.file?.flush()
    }

    /// For an app going to the background: the writes not yet sent get up to `bound` to reach
    /// the server, then the connection is closed (the server sees the subscriber go, and its
    /// presence leaves as closed) and observers are told `ConnectionState.suspended`. The carts,
    /// their seq, the writes still pending and the cache file stay as they are; writes made
    /// meanwhile are kept (and saved) to be sent on `resume()`. Returns once the connection is
    /// closed.
    ///
    /// ```swift
    /// .onChange(of: scenePhase) { _, phase in
    ///     switch phase {
    ///     case .background: Task { await store.suspend() }
    ///     case .active: store.resume()
    ///     default: break
    ///     }
    /// }
    /// ```
    public func suspend(sendingPendingWritesFor bound: Duration = .seconds(2)) async {
        let unsent = replica.read { state in state.pending.entries.filter { $0.answeredSeq == nil }.map(\.write) }
        if !unsent.isEmpty {
            // Whichever comes first: every write's outcome, or the bound.
            let clock = self.clock
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                let finished = NIOLockedValueBox(false)
                let finish: @Sendable () -> Void = {
                    let first = finished.withLockedValue { wasFinished in
                        defer { wasFinished = true }
                        return !wasFinished
                    }
                    if first { done.resume() }
                }
                Task { [self] in
                    for write in unsent { _ = await outcome(of: write) }
                    finish()
                }
                Task {
                    try? await clock.sleep(for: bound)
                    finish()
                }
            }
        }
        await replica.suspend()
    }

    /// Back from `suspend()` (the app is active again): connects at once, skipping any pause,
    /// resumes after the replica's seq (nothing missed, nothing twice), and sends the writes
    /// made meanwhile. Does nothing for a store that is not suspended.
    public func resume() {
        replica.resume()
    }

    /// The network changed (it is back, or another one took over): a store waiting before its
    /// next attempt tries now rather than at the end of its backoff. A live connection is left
    /// as it is. Where the `Network` framework exists, the store calls it itself when the
    /// device's path becomes satisfied (`NWPathMonitor`); elsewhere an app calls it.
    public func retryNow() {
        replica.retryNow()
    }

    /// A cart as the replica holds it now (consistent with the last callback made), or nil if
    /// no living observer wants it (or the replica has not loaded yet). An observed cart that
    /// has no events yet is empty at version 0.
    public func cart(_ id: String) -> Cart? {
        replica.read { $0.held.loaded ? $0.held.carts[id] : nil }
    }

    /// The carts the replica holds, by id.
    public var carts: [Cart] {
        replica.read { $0.held.carts.values.sorted { $0.id < $1.id } }
    }

    /// The seq the replica reflects: every event up to it has been applied. Nil before it
    /// loads.
    public var seq: Int64? {
        replica.read { $0.held.loaded ? $0.held.seq : nil }
    }

    /// The connection, now.
    public var connectionState: ConnectionState {
        replica.read(\.lifecycle.connection)
    }

    /// What the store made of its cache file (`cacheFile`), and whether saving to it works;
    /// `.opening` while the file is being read.
    public var cacheState: ReplicaCacheState {
        replica.cacheState
    }

    /// Waits until the cache file is open and read (at once for a store without one, `.none`),
    /// and returns what the store made of it. The store never reads it on the caller's thread.
    @discardableResult
    public func cacheFileOpened() async -> ReplicaCacheState {
        await opening?.value
        return replica.cacheState
    }

    /// Whether the carts held are those of the cache file, the server not reached since.
    public var isFromCache: Bool {
        replica.read(\.held.fromCache)
    }
}

extension RemoteCartStore: CustomDebugStringConvertible {
    /// What the store is doing now, in one line: its connection, what its subscription follows
    /// against what its observers want, the carts held and their seq, pending writes, the cache
    /// file. For logs and failure messages; its form may change.
    public var debugDescription: String {
        let wanted = observers.wanted
        return replica.read { state in
            let loop: String =
                switch replica.loopState {
                case .starting: "starting"
                case .planning(let selection): "planning for \(selection.map(Self.describe) ?? "nothing")"
                case .idle: "idle"
                case .following(let selection): "following \(Self.describe(selection))"
                }
            let held = state.held
            return "RemoteCartStore(\(server.baseURL.absoluteString), connection \(state.lifecycle.connection), loop \(loop), "
                + "observers want \(wanted.map(Self.describe) ?? "nothing"), "
                + "held \(held.covered.map(Self.describe) ?? "nothing")\(held.loaded ? " at seq \(held.seq)" : " (not loaded)")"
                + "\(held.fromCache ? " from the cache file" : ""), \(state.pending.entries.count) pending writes (\(state.pending.entries.filter { $0.answeredSeq != nil }.count) answered, awaiting their events; sender \(state.pending.sending)), "
                + "refused \(state.refusals.refused.keys.sorted()), cache \(cacheState)\(state.lifecycle.closed ? ", closed" : ""))"
        }
    }

    private static func describe(_ selection: CartSelection) -> String {
        selection.subscription.map { "carts \($0)" } ?? "all carts"
    }
}

extension RemoteCartStore {
    /// How a store is present on the carts its observers follow: under a key, showing a state.
    public struct Presence: Sendable, Hashable {
        /// The member's key: the same on every connection of the store.
        public let key: String
        /// What the member shows the others at first (`setPresenceState` changes it).
        public var state: PresenceState

        /// Present under a key made for this store (random, `A-Za-z0-9-`), showing `state`.
        public init(state: PresenceState = [:]) {
            key = UUID().uuidString.lowercased()
            self.state = state
        }

        /// Present under `key` (an app may keep one per device, so that a relaunch within the
        /// lease is no new member), showing `state`.
        ///
        /// - Throws: `RemoteStoreError.invalid` for a key that is not 1–64 characters of
        ///   `A-Za-z0-9._-` (`invalid_presence`), or a state over `PresenceLimits.maxStateBytes`
        ///   (`invalid_presence_state`).
        public init(key: String, state: PresenceState = [:]) throws(RemoteStoreError) {
            try CartServerAPI.check { () throws(FanoutError) in
                try PresenceLimits.check(key: key)
                try PresenceLimits.check(state)
            }
            self.key = key
            self.state = state
        }
    }

    /// What this store's member shows the others now; nil for a store without presence.
    public var presenceState: PresenceState? {
        presenceStates?.state
    }

    /// Changes what this store's member shows the others on its carts. On a WebSocket the
    /// change is sent at once (the latest of quick changes, at most
    /// `PresenceLimits.maxStateChangesPerSecond` a second); on an event stream a stream with
    /// the new state replaces the old one, opened before the old one is closed, so the others
    /// see a state change, not a leave and a join. Observers hear it back
    /// (`PresenceChange.updated`).
    ///
    /// - Throws: `RemoteStoreError.invalid`: a state over `PresenceLimits.maxStateBytes`
    ///   (`invalid_presence_state`), or a store made without presence (`invalid_presence`).
    public func setPresenceState(_ state: PresenceState) throws(RemoteStoreError) {
        guard let presenceStates else {
            throw .invalid(FanoutError(.invalidPresence, "this store was made without presence: RemoteCartStore(presence:)"))
        }
        try CartServerAPI.check { () throws(FanoutError) in try PresenceLimits.check(state) }
        presenceStates.state = state
    }

    /// Who is on `cartID` now, oldest first, this store's member included, as the server last
    /// said; nil when the store does not know (without presence, or not yet told). While the
    /// store reconnects it is the last known presence.
    public func presence(of cartID: String) -> [PresenceMember]? {
        replica.read { $0.presence.members[cartID] }
    }

    /// Why the store is without presence now, when it was made with it: the server refused it
    /// (`presence_full`, …), or the store follows every cart (presence needs carts named). Nil
    /// while presence works, or before the first connection.
    public var presenceProblem: RemoteStoreError? {
        replica.read { $0.presence.problem }
    }
}

extension RemoteCartStore {
    /// The most writes the store holds unconfirmed: one more throws
    /// `RemoteStoreError.tooManyPendingWrites`.
    public static let maxPendingWrites = 1_000
    /// How many ended writes the store remembers the outcome of (`outcome(of:)`).
    public static let rememberedOutcomes = 1_000

    /// Makes `write` to the cart, at once: observers of the cart are told it pending
    /// (`didChangePending`) before this returns (it never waits for the server), and it is sent
    /// in order with the store's other writes, retried across failures with the same idempotency
    /// key until the server answers (so applied once), and confirmed when its event is applied,
    /// or rolled back (`didReject`) if the server refuses it. See `outcome(of:)`. `addItem`,
    /// `setQuantity`, `removeItem` and `clear` (`CartWriter`) make their writes with it.
    ///
    /// - Parameters:
    ///   - write: what to do.
    ///   - cartID: the cart.
    ///   - expectedVersion: the version the cart must be at on the server (0: must not exist
    ///     yet); a write made offline against an old version is refused (`version_conflict`).
    /// - Throws: `RemoteStoreError.invalid` for values the server would refuse (not taken),
    ///   `.tooManyPendingWrites` when `maxPendingWrites` wait already, `.storeClosed` after
    ///   `close()`.
    @discardableResult
    public func write(_ write: CartWrite, to cartID: String, expectedVersion: Int64? = nil) async throws(RemoteStoreError) -> PendingWrite {
        try CartServerAPI.check { () throws(FanoutError) in
            try write.check()
            try CartLimits.checkCartID(cartID)
        }
        // After the writes the cache file held, and saved to it.
        await opening?.value
        let pending = PendingWrite(
            id: UUID().uuidString, cartID: cartID, write: write, expectedVersion: expectedVersion, madeAt: Date())
        // Shown at once; then saved (synced) by the file's own thread while this call waits,
        // its caller's thread free: the main thread never waits on the disk.
        if let (file, number) = try replica.addPending(pending, observers: observers) { await file.synced(through: number) }
        sendPending.yield()
        return pending
    }

    /// The writes the server has not confirmed yet, in the order they were made.
    public var pendingWrites: [PendingWrite] {
        replica.read { $0.pending.entries.map(\.write) }
    }

    /// Waits for what becomes of `write`: confirmed (with its event's seq, once the replica
    /// shows it, or at once for a cart no observer follows), or rejected; `unknown` for a write
    /// this store does not remember, or when it closes first.
    public func outcome(of write: PendingWrite) async -> WriteOutcome {
        await replica.outcome(of: write.id)
    }

    /// Waits until the replica has applied every event up to `seq` (read your writes: the seq
    /// of a write's outcome, or of `server`'s answer). Returns at once if it has, and when the
    /// store closes. It advances only while some observer follows carts.
    public func applied(through seq: Int64) async {
        await replica.applied(through: seq)
    }

    /// Sends the pending writes in order until none is left to send: a failure that retrying
    /// may cure (no connection, a server error or overload, an expired token) waits with
    /// backoff and sends the same write again, with the same key; a refusal ends it.
    private static func sendPendingWrites(
        replica: Replica, api: CartServerAPI, observers: Observers, lifetime: Duration, clock: any Clock<Duration>
    ) async {
        var failures = 0
        var lastError: String?
        defer { replica.sending(.idle) }
        while !Task.isCancelled, let write = replica.nextPendingWrite {
            let age = Date().timeIntervalSince(write.madeAt)
            if age > Double(lifetime.components.seconds) + Double(lifetime.components.attoseconds) / 1e18 {
                replica.rejected(write.id, because: .pendingWriteExpired(write.madeAt), observers: observers)
                continue
            }
            replica.sending(.sending(id: write.id, since: .now, failures: failures, error: lastError))
            do {
                let answer = try await api.write(
                    write.write, to: write.cartID, expectedVersion: write.expectedVersion, idempotencyKey: write.id)
                failures = 0
                lastError = nil
                replica.answered(write.id, seq: answer.seq, observers: observers)
            } catch let error as RemoteStoreError where !error.isWorthRetrying {
                failures = 0
                lastError = nil
                replica.rejected(write.id, because: error, observers: observers)
            } catch {
                failures += 1
                lastError = "\(error)"
                replica.sending(.pausing(failures: failures, error: "\(error)"))
                try? await clock.sleep(for: FanoutSubscription.backoff(failures: failures))
            }
        }
    }
}

extension RemoteStoreError {
    /// Whether a write refused with this may succeed sent again as it is: no answer, a server
    /// error, overload, or credentials a provider may renew (401). A refusal of the write
    /// itself (a conflict, a rule, a cart the token may not write) may not.
    var isWorthRetrying: Bool {
        switch self {
        case .unreachable, .unexpectedAnswer: true
        case .refused(let status, let code, _, _, _):
            status >= 500 || status == 401 || status == 408 || status == 429 || code?.isRetryable == true
        case .invalid, .tooManyPendingWrites, .pendingWriteExpired, .storeClosed: false
        }
    }
}

extension RemoteCartStore {
    /// The weak observers of a `RemoteCartStore`, each with the carts it wants: `CartObserver`s,
    /// as a `CartStore`'s are.
    public final class Observers: CartObserverSet {
        let registry: WeakObserverSet<WeakRemoteCartObserver>
        private let replica: Replica

        init(replica: Replica) {
            self.replica = replica
            registry = WeakObserverSet(deferringCallsTo: replica.calls)
        }

        /// Adds `observer`, held weakly, for `carts`. If the replica holds them it is told their
        /// state now (on its queue); otherwise as soon as the store has loaded them. Adding an
        /// observer again replaces its registration, and it is told the state again.
        ///
        /// - Parameters:
        ///   - observer: held weakly.
        ///   - carts: the carts it wants: `.only([...])`, or `.all`.
        ///   - queue: a serial queue to call it on, in order; `nil` calls it on the thread
        ///     that made the change (the store's receiving task, mostly), never under the
        ///     store's lock: it may read the store and add or remove observers.
        public func add(_ observer: any CartObserver, carts: CartSelection, queue: DispatchQueue?) {
            let interest = ObserverInterest(carts)
            replica.admit(self) {
                registry.add(observer, queue: queue, interest: interest)
            } greet: { replica in
                replica.greet(observer, interest, in: registry)
            }
        }

        /// Removes `observer`: after this returns it gets no further callback (not even one
        /// queued on its queue). Carts no other observer wants stop arriving soon after.
        public func remove(_ observer: any CartObserver) {
            registry.remove(observer)
            replica.reconsider(self)
        }

        public func contains(_ observer: any CartObserver) -> Bool { registry.contains(observer) }

        /// The number of live observers (O(n): released ones are swept first).
        public var count: Int { registry.count }

        /// What the living observers want together; nil when none lives.
        var wanted: CartSelection? {
            registry.interests.lazy.map(\.selection).reduce(nil) { $0?.union($1) ?? $1 }
        }
    }
}

/// Lets the replica hand observers the store without keeping it alive.
struct WeakStore: Sendable {
    weak var store: RemoteCartStore?
}

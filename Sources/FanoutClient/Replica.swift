import FanoutConcurrency
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import WeakObservers

/// The carts a `RemoteCartStore` holds, and what it tells its observers as they change.
///
/// One lock makes "apply a message, then decide whom to tell what" one step, and "add an
/// observer, then decide to tell it the state" another: an observer added at any moment gets
/// the state, then exactly the later events. No observer's code runs under it: what is decided
/// is dispatched to the observers' queues, or, for those without one, appended to `calls` and
/// made once the lock is released (`withLock`), in the order decided. The lock is recursive
/// for the replica's own nested steps (a plan's reads, `debugDescription`).
///
/// `package`: `fanout-client-bench` drives a store's replica through the steps its subscription
/// takes (`plan`, then `take` for each update), to time them without a network in between.
package final class Replica: @unchecked Sendable {
    struct State {
        /// The carts held: every cart of `covered` that has events (and, for named carts, the
        /// others too, empty at version 0).
        var carts: [String: Cart] = [:]
        /// The carts the replica keeps up to date; nil when no observer lives.
        var covered: CartSelection?
        /// Every event up to it has been applied (once `loaded`).
        var seq: Int64 = 0
        /// A snapshot (or the carts read over HTTP) has been taken since the last reset.
        var loaded = false
        /// Set when the replica was dropped for want of consistency: the next snapshot is a
        /// resync for the observers that had the old state.
        var resyncBecause: ResyncReason?
        var connection: RemoteCartStore.ConnectionState = .idle
        /// Carts the server refused to this store's credentials (`forbidden_cart`): left out of
        /// the subscription, their observers told; asked again after
        /// `FanoutSubscription.refusalPause`, or once no observer wants them.
        var refused: [String: Refusal] = [:]
        /// A subscription was refused for one of its carts: find which before the next plan.
        var findRefusedCarts = false
        /// When that was last done: at most once per `FanoutSubscription.refusalPause`.
        var refusedCartsFoundAt: ContinuousClock.Instant?
        /// `RemoteCartStore.close()` was called: nothing more is applied or told.
        var closed = false
        /// `RemoteCartStore.suspend()` was called, and not `resume()` since: no connection.
        var suspended = false
        /// Callers of `suspend()` waiting for the connection to be closed.
        var suspendWaiters: [CheckedContinuation<Void, Never>] = []
        /// Writes made through the store that the server has not confirmed, in order.
        var pending = PendingWrites()
        /// Callers of `applied(through:)` waiting for the replica to reach a seq.
        var seqWaiters: [(seq: Int64, continuation: CheckedContinuation<Void, Never>)] = []
        /// The carts came from the cache file and the server has not been reached since.
        var fromCache = false
        /// The identity of the server's database the carts are of (its welcome's `databaseId`).
        var databaseID: String?
        /// The store was made with presence.
        var presenceWanted = false
        /// The presence of each cart whose presence the server sent, oldest member first.
        var presence: [String: [PresenceMember]] = [:]
        /// Why the store is without presence now, when it wants it.
        var presenceProblem: RemoteStoreError?
    }

    /// A cart the server refused, and when.
    struct Refusal {
        let error: RemoteStoreError
        let at: ContinuousClock.Instant
    }

    private let lock = NSRecursiveLock()
    /// How deep the thread holding `lock` is in `withLock`: the outermost makes the calls.
    private var depth = 0
    var state = State()
    /// The observers' calls decided under the lock, made after it (`DeferredCalls`).
    let calls = DeferredCalls()
    /// What the subscription's loop does against what the observers want (under the lock).
    private(set) var demand = SubscriptionDemand()
    /// Wakes the subscription's loop to plan again (`RemoteCartStore` runs it with these).
    let wakeUps = WakeUps()
    /// Where the replica is kept between runs, if anywhere (set before the store's tasks start).
    package private(set) var file: ReplicaFile?
    /// What the store made of its cache file: `.opening` until `restore` has read it.
    var openedCache = ReplicaCacheState.none
    let store = NIOLockedValueBox(WeakStore())

    /// Opens the cache file and restores what it holds, before the store connects or takes a
    /// write: the carts (the observers added meanwhile are told them, `didLoadFromCache`), their
    /// seq (the store resumes after it) and the writes still pending (sent again, with their
    /// keys, before any later one). Returns whether any write is pending.
    ///
    /// On a thread of its own, never the caller's nor Swift concurrency's: opening may wait for
    /// another connection to let go of the file (its busy timeout), and reads every cart.
    func restore(from url: URL, server: URL, observers: RemoteCartStore.Observers) async -> Bool {
        let (file, saved, cacheState) = await withCheckedContinuation { opened in
            Thread.detachNewThread { opened.resume(returning: ReplicaFile.open(url, server: server)) }
        }
        return withLock {
            self.file = file
            openedCache = cacheState
            guard let saved else { return false }
            if let covered = saved.covered, let seq = saved.seq {
                state.carts = saved.carts
                state.covered = covered
                state.seq = seq
                state.databaseID = saved.databaseID
                state.loaded = true
                state.fromCache = true
            }
            for write in saved.pending { state.pending.append(write) }
            greetWaiting(observers)
            return !saved.pending.isEmpty
        }
    }

    /// What the store made of its cache file, and whether saving to it still works.
    var cacheState: ReplicaCacheState {
        withLock { file?.failure.map { .failing($0) } ?? openedCache }
    }

    /// Runs `body` under the replica's lock, then, once the outermost step has released it,
    /// makes the observers' calls it decided.
    func withLock<T, Failure: Error>(_ body: () throws(Failure) -> T) throws(Failure) -> T {
        lock.lock()
        depth += 1
        let result = Result(catching: body)
        depth -= 1
        let outermost = depth == 0
        lock.unlock()
        if outermost { calls.run() }
        return try result.get()
    }

    /// Named carts above this many are read with one `GET /carts` rather than one request each.
    static let fetchOneByOneLimit = 20

    func read<T>(_ body: (State) -> T) -> T {
        withLock { body(state) }
    }

    /// Adds an observer (`add` puts it in the set) and tells it the state if the replica holds
    /// its carts, as one step; then wakes the subscription if it follows something else now.
    func admit(_ observers: RemoteCartStore.Observers, add: () -> Void, greet: (Replica) -> Void) {
        withLock {
            add()
            greet(self)
            reconsiderLocked(observers)
        }
    }

    /// Wakes the subscription's loop if it follows something else than what the living
    /// observers want (`SubscriptionDemand`): after an observer is added or removed, or found
    /// released, and after each plan.
    func reconsider(_ observers: RemoteCartStore.Observers) {
        withLock { reconsiderLocked(observers) }
    }

    private func reconsiderLocked(_ observers: RemoteCartStore.Observers) {
        guard !state.closed, !state.suspended, demand.mayWake else { return }
        let expired = state.refused.values.contains { $0.at.duration(to: .now) >= FanoutSubscription.refusalPause }
        if demand.wake(toFollow: observers.wanted.map(served), refusalExpired: expired) { wakeUps.wake() }
    }

    /// The loop's state, for tests that hold an ordering (`SubscriptionDemand.Loop`).
    package var loopState: SubscriptionDemand.Loop { withLock { demand.loop } }

    /// Tells a newly added observer the state, if the replica holds its carts (and which of
    /// them the server refused). Under the lock.
    func greet(_ observer: any CartObserver, _ interest: ObserverInterest, in set: ObserverSetOfStore) {
        guard !state.closed else { return }
        let store = store.withLockedValue(\.store)
        if let store, case .carts(let ids) = interest.selection {
            // Each refused cart as `readRefusing` told it: its own callback, its own error.
            for id in ids.sorted() {
                guard let error = state.refused[id]?.error else { continue }
                set.notify(only: observer) { $0.cartSource(store, didRefuse: [id], because: error) }
            }
        }
        let served = served(interest.selection)
        // Not held (yet): told once a plan has read them (`greetWaiting`).
        guard let covered = state.covered, covered.covers(served) else { return }
        // Every cart it wants was refused: nothing to load.
        guard state.loaded, let store, served != .carts([]) || interest.selection == .carts([]) else { return }
        interest.markLoaded()
        let carts = Self.carts(of: interest.selection, in: state.carts)
        let fromCache = state.fromCache
        set.notify(only: observer) { fromCache ? $0.cartSource(store, didLoadFromCache: carts) : $0.cartSource(store, didLoad: carts) }
        tellPending(to: observer, interest, in: set)
        let presence = presence(of: interest.selection)
        if !presence.isEmpty {
            set.notify(only: observer) { observer in
                for (cartID, members, change) in presence {
                    observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
                }
            }
        }
    }

    /// `selection` without the carts the server refused.
    private func served(_ selection: CartSelection) -> CartSelection {
        guard case .carts(let ids) = selection, !state.refused.isEmpty else { return selection }
        return .carts(ids.filter { state.refused[$0] == nil })
    }

    /// The next connection's plan: what the living observers want, after the replica's seq,
    /// without the carts the server refused. Carts they want that the replica does not hold
    /// are read over HTTP first (their state is then at or after the seq; replayed events at
    /// or below their version are skipped); a cart the server refuses is told to its observers
    /// and left out. Any other failure throws: the subscription reports it and asks again.
    package func plan(for observers: RemoteCartStore.Observers, api: CartServerAPI) async throws -> FanoutSubscription.Plan? {
        let (closed, suspended, wanted) = withLock {
            let wanted = observers.wanted
            demand.beginPlanning(wanted.map(served))
            if state.suspended, !state.closed {
                // No connection until `resume()`: the carts and their seq stay as they are.
                demand.planned(nil)
                setConnection(.suspended, observers: observers)
                for waiter in state.suspendWaiters { waiter.resume() }
                state.suspendWaiters = []
            }
            return (state.closed, state.suspended, wanted)
        }
        guard !closed, !suspended else { return nil }
        let plan = try await plan(wanting: wanted, observers: observers, api: api)
        withLock {
            demand.planned(plan.map { $0.carts.map(CartSelection.only) ?? .all })
            reconsiderLocked(observers)
        }
        return plan
    }

    private func plan(wanting wanted: CartSelection?, observers: RemoteCartStore.Observers, api: CartServerAPI) async throws
        -> FanoutSubscription.Plan?
    {
        guard let allWanted = wanted else {
            withLock {
                // Nothing followed any more; the writes not yet confirmed, and who waits, stay, and
                // carts restored from the cache file wait for the observers they are kept for.
                if !state.fromCache {
                    state = State(
                        connection: state.connection, pending: state.pending, seqWaiters: state.seqWaiters, databaseID: state.databaseID,
                        presenceWanted: state.presenceWanted)
                }
                setConnection(.idle, observers: observers)
            }
            return nil
        }
        let findRefused = withLock {
            // Refusals of carts nobody wants now, or old enough, are forgotten: asked again.
            state.refused = state.refused.filter { id, refusal in
                allWanted.contains(id) && refusal.at.duration(to: .now) < FanoutSubscription.refusalPause
            }
            defer { state.findRefusedCarts = false }
            return state.findRefusedCarts
        }
        if findRefused, case .carts(let ids) = allWanted {
            // Which of the carts made the server refuse the subscription: each read alone.
            for id in ids.sorted() where read({ $0.refused[id] == nil }) {
                try await readRefusing(id, api: api, observers: observers)
            }
        }
        let (loaded, covered, seq) = read { ($0.loaded, $0.covered, $0.seq) }
        var wanted = read { _ in served(allWanted) }
        guard loaded, let covered else {
            guard wanted != .carts([]) else { return everyCartRefused(observers) }
            withLock {
                state.covered = wanted
                state.carts = [:]
            }
            return FanoutSubscription.Plan(carts: wanted.subscription, since: nil)
        }
        var fetched: [Cart] = []
        switch wanted {
        case .all where covered != .all:
            fetched = try await api.carts().carts
        case .carts(let ids):
            let missing = ids.filter { !covered.contains($0) }
            if missing.count > Self.fetchOneByOneLimit {
                let all = Dictionary(try await api.carts().carts.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
                fetched = missing.map { all[$0] ?? Cart(id: $0) }
            } else {
                for id in missing.sorted() {
                    if let cart = try await readRefusing(id, api: api, observers: observers) { fetched.append(cart) }
                }
                wanted = read { _ in served(allWanted) }
            }
        default:
            break
        }
        guard wanted != .carts([]) else { return everyCartRefused(observers) }
        withLock {
            for cart in fetched where !covered.contains(cart.id) { state.carts[cart.id] = cart }
            state.carts = state.carts.filter { wanted.contains($0.key) }
            if state.covered != wanted {
                file?.saveAll(carts: state.carts, covered: wanted, seq: state.seq, databaseID: state.databaseID)
            }
            state.covered = wanted
            greetWaiting(observers)
        }
        return FanoutSubscription.Plan(carts: wanted.subscription, since: seq)
    }

    /// Reads one cart over HTTP; nil, and its observers told, when the server refuses it to
    /// these credentials (`forbidden_cart`). Other failures throw.
    @discardableResult
    private func readRefusing(_ id: String, api: CartServerAPI, observers: RemoteCartStore.Observers) async throws -> Cart? {
        do {
            return try await api.currentCart(id)
        } catch let error as RemoteStoreError where error.code == .forbiddenCart {
            withLock {
                state.refused[id] = Refusal(error: error, at: .now)
                guard !state.closed, let store = store.withLockedValue(\.store) else { return }
                observers.registry.notify(where: { $0.selection.contains(id) }) { observer, _ in
                    observer.cartSource(store, didRefuse: [id], because: error)
                }
            }
            return nil
        }
    }

    /// Every cart wanted was refused: no connection, and the store says why.
    private func everyCartRefused(_ observers: RemoteCartStore.Observers) -> FanoutSubscription.Plan? {
        withLock {
            if let refusal = state.refused.values.max(by: { $0.at < $1.at }) {
                setConnection(.refused(refusal.error), observers: observers)
            }
            state.covered = nil
            state.loaded = false
            state.carts = [:]
        }
        return nil
    }

    /// Applies one update of the subscription and tells the observers.
    package func take(_ update: FanoutSubscription.Update, observers: RemoteCartStore.Observers) throws {
        try withLock {
            guard !state.closed else { return }
            switch update {
            case .connecting(let plan):
                if state.connection == .idle || state.connection == .live { setConnection(.connecting, observers: observers) }
                connecting(plan, observers: observers)
            case .presence(let message, _):
                applyPresence(message, observers: observers)
            case .presenceRefused(let error):
                presenceUnavailable(error, observers: observers)
            case .welcome(let welcome):
                if let known = state.databaseID, let said = welcome.databaseID, said != known, state.loaded {
                    // Another database than the one the carts are of: nothing after their seq
                    // can be trusted. A snapshot replaces them, and observers are told why.
                    state.loaded = false
                    state.resyncBecause = .otherDatabase
                    file?.forgetCarts()
                    throw ProtocolViolation(
                        description: "the server's database is \(said), the replica's carts are of \(known): read again")
                }
                state.databaseID = welcome.databaseID ?? state.databaseID
                state.fromCache = false
                setConnection(.live, observers: observers)
            case .snapshot(let snapshot, let reason):
                load(snapshot, reason: reason, observers: observers)
            case .event(let event, _):
                try apply(event, observers: observers)
            case .disconnected(let problem, _):
                setConnection(.reconnecting(problem), observers: observers)
            case .refused(let error, _):
                if error.code == .forbiddenCart, case .carts = state.covered,
                    state.refusedCartsFoundAt.map({ $0.duration(to: .now) >= FanoutSubscription.refusalPause }) ?? true
                {
                    // One of the carts asked for: find which, at once, and serve the others.
                    state.findRefusedCarts = true
                    state.refusedCartsFoundAt = .now
                    wakeUps.wake()
                } else {
                    setConnection(.refused(error), observers: observers)
                }
            case .snapshotPart, .serverError:
                break
            }
        }
    }

    private func load(_ snapshot: CartSnapshot, reason: SnapshotReason, observers: RemoteCartStore.Observers) {
        guard let covered = state.covered else { return }
        var carts: [String: Cart] = [:]
        if case .carts(let ids) = covered {
            for id in ids { carts[id] = Cart(id: id) }
        }
        for cart in snapshot.carts where covered.contains(cart.id) { carts[cart.id] = cart }
        let wasLoaded = state.loaded
        state.carts = carts
        state.seq = snapshot.seq
        state.loaded = true
        let resync: ResyncReason? =
            switch reason {
            case .initial: state.resyncBecause
            case .sinceTooOld: .historyPruned
            case .sinceAhead: .otherDatabase
            }
        state.resyncBecause = nil
        let loadedCarts = carts
        file?.saveAll(carts: carts, covered: covered, seq: snapshot.seq, databaseID: state.databaseID)
        if let resync, wasLoaded || resync == .inconsistent || resync == .otherDatabase, let store = store.withLockedValue(\.store) {
            observers.registry.notify(where: \.isLoaded) { observer, interest in
                observer.cartSource(store, didResync: Self.carts(of: interest.selection, in: loadedCarts), because: resync)
            }
        }
        greetWaiting(observers)
        settleAllPending(observers: observers)
        resumeSeqWaiters()
    }

    private func apply(_ event: CartEvent, observers: RemoteCartStore.Observers) throws {
        guard state.loaded, state.covered?.contains(event.cartID) == true else { return }
        var cart = state.carts[event.cartID] ?? Cart(id: event.cartID)
        // Already applied (replayed after a resubscription, or its state was read over HTTP).
        guard event.version > cart.version else {
            state.seq = max(state.seq, event.seq)
            file?.save(nil, seq: state.seq)
            settlePending(of: event.cartID, confirmedKey: event.idempotencyKey, observers: observers)
            resumeSeqWaiters()
            return
        }
        guard event.version == cart.version + 1 else {
            // A version skipped: something was lost. Rebuild from a snapshot rather than trust it.
            state.loaded = false
            state.resyncBecause = .inconsistent
            throw ProtocolViolation(
                description:
                    "event \(event.seq) takes cart \(event.cartID) to version \(event.version), but the replica has \(cart.version)")
        }
        cart.apply(event)
        state.carts[event.cartID] = cart
        state.seq = max(state.seq, event.seq)
        file?.save(cart, seq: state.seq)
        defer { resumeSeqWaiters() }
        guard let store = store.withLockedValue(\.store) else { return }
        let id = event.cartID
        let after = cart
        observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(id) }) { observer, _ in
            observer.cartSource(store, didApply: event, to: after)
        }
        // The event of one of this store's writes confirms it, even before its answer comes.
        settlePending(of: id, confirmedKey: event.idempotencyKey, observers: observers)
    }

    /// Tells every observer that was not told the state yet, and whose carts the replica now
    /// holds, their state. Under the lock.
    private func greetWaiting(_ observers: RemoteCartStore.Observers) {
        guard state.loaded, let covered = state.covered, let store = store.withLockedValue(\.store) else { return }
        let carts = state.carts
        let fromCache = state.fromCache
        let pending = Set(state.pending.entries.map(\.write.cartID)).sorted().map { cartID in
            let writes = state.pending.of(cartID)
            return (cartID: cartID, writes: writes, shown: (carts[cartID] ?? Cart(id: cartID)).applying(writes))
        }
        let presence = state.presence
        let presenceProblem = state.presenceWanted ? state.presenceProblem : nil
        observers.registry.notify(where: { interest in
            let served = self.served(interest.selection)
            guard !interest.isLoaded, covered.covers(served), served != .carts([]) || interest.selection == .carts([]) else {
                return false
            }
            interest.markLoaded()
            return true
        }) { observer, interest in
            let loaded = Self.carts(of: interest.selection, in: carts)
            if fromCache { observer.cartSource(store, didLoadFromCache: loaded) } else { observer.cartSource(store, didLoad: loaded) }
            for (cartID, writes, shown) in pending where interest.selection.contains(cartID) {
                observer.cartSource(store, didChangePending: writes, showing: shown)
            }
            for (cartID, members, change) in Self.presence(of: interest.selection, in: presence, problem: presenceProblem) {
                observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
            }
        }
    }

    /// Tells every observer the store is closed: their last callback.
    /// Closes the connection until `resume`: returns once the subscription's loop has let it go.
    func suspend() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            withLock {
                guard !state.closed else { return waiter.resume() }
                state.suspended = true
                state.suspendWaiters.append(waiter)
            }
            wakeUps.wake()
        }
    }

    /// Connects again at once after `suspend`, whatever pause the loop was in.
    func resume() {
        let wasSuspended = withLock {
            defer { state.suspended = false }
            return state.suspended
        }
        if wasSuspended { wakeUps.wake() }
    }

    /// Ends the loop's pause before its next attempt, if it is in one (the network is back):
    /// a live connection is left as it is.
    func retryNow() {
        let waiting = withLock {
            switch state.connection {
            case .reconnecting, .refused: !state.suspended && !state.closed
            default: false
            }
        }
        if waiting { wakeUps.wake() }
    }

    func close(observers: RemoteCartStore.Observers) {
        withLock {
            guard !state.closed else { return }
            setConnection(.closed, observers: observers)
            state.closed = true
            for waiter in state.suspendWaiters { waiter.resume() }
            state.suspendWaiters = []
            state.pending.abandonWaiters()
            resumeSeqWaiters()
        }
    }

    private func setConnection(_ connection: RemoteCartStore.ConnectionState, observers: RemoteCartStore.Observers) {
        guard state.connection != connection else { return }
        state.connection = connection
        guard let store = store.withLockedValue(\.store) else { return }
        observers.registry.notify { $0.cartSource(store, connectionDidChange: connection) }
    }

    static func carts(of selection: CartSelection, in carts: [String: Cart]) -> [Cart] {
        selection.carts(in: carts)
    }
}

typealias ObserverSetOfStore = WeakObserverSet<WeakRemoteCartObserver>

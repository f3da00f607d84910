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
    /// The replica's state, by concern (`ReplicaState.swift`): each part owns its fields and
    /// says its transitions.
    struct State {
        var held = HeldCarts()
        var lifecycle = Lifecycle()
        var refusals = Refusals()
        /// Writes made through the store that the server has not confirmed, in order.
        var pending = PendingWrites()
        var seqWaiters = SeqWaiters()
        var presence = HeldPresence()
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
            state.held.restore(saved)
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
        guard !state.lifecycle.closed, !state.lifecycle.suspended, demand.mayWake else { return }
        if demand.wake(toFollow: observers.wanted.map(state.refusals.served), refusalExpired: state.refusals.anyExpired) { wakeUps.wake() }
    }

    /// The loop's state, for tests that hold an ordering (`SubscriptionDemand.Loop`).
    package var loopState: SubscriptionDemand.Loop { withLock { demand.loop } }

    /// Tells a newly added observer the state, if the replica holds its carts (and which of
    /// them the server refused). Under the lock.
    func greet(_ observer: any CartObserver, _ interest: ObserverInterest, in set: ObserverSetOfStore) {
        guard !state.lifecycle.closed else { return }
        let store = store.withLockedValue(\.store)
        if let store, case .carts(let ids) = interest.selection {
            // Each refused cart as `readRefusing` told it: its own callback, its own error.
            for id in ids.sorted() {
                guard let error = state.refusals.error(of: id) else { continue }
                set.notify(only: observer) { $0.cartSource(store, didRefuse: [id], because: error) }
            }
        }
        let served = state.refusals.served(interest.selection)
        // Not held (yet): told once a plan has read them (`greetWaiting`).
        guard let covered = state.held.covered, covered.covers(served) else { return }
        // Every cart it wants was refused: nothing to load.
        guard state.held.loaded, let store, served != .carts([]) || interest.selection == .carts([]) else { return }
        interest.markLoaded()
        let carts = Self.carts(of: interest.selection, in: state.held.carts)
        let fromCache = state.held.fromCache
        set.notify(only: observer) { fromCache ? $0.cartSource(store, didLoadFromCache: carts) : $0.cartSource(store, didLoad: carts) }
        tellPending(to: observer, interest, in: set)
        let presence = state.presence.told(to: interest.selection)
        if !presence.isEmpty {
            set.notify(only: observer) { observer in
                for (cartID, members, change) in presence {
                    observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
                }
            }
        }
    }

    /// The next connection's plan: what the living observers want, after the replica's seq,
    /// without the carts the server refused. Carts they want that the replica does not hold
    /// are read over HTTP first (their state is then at or after the seq; replayed events at
    /// or below their version are skipped); a cart the server refuses is told to its observers
    /// and left out. Any other failure throws: the subscription reports it and asks again.
    package func plan(for observers: RemoteCartStore.Observers, api: CartServerAPI) async throws -> FanoutSubscription.Plan? {
        let (closed, suspended, wanted) = withLock {
            let wanted = observers.wanted
            demand.beginPlanning(wanted.map(state.refusals.served))
            if state.lifecycle.suspended, !state.lifecycle.closed {
                // No connection until `resume()`: the carts and their seq stay as they are.
                demand.planned(nil)
                setConnection(.suspended, observers: observers)
                for waiter in state.lifecycle.letGo() { waiter.resume() }
            }
            return (state.lifecycle.closed, state.lifecycle.suspended, wanted)
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
                if !state.held.fromCache {
                    state.held.release()
                    state.refusals = Refusals()
                    state.presence = HeldPresence(wanted: state.presence.wanted)
                }
                setConnection(.idle, observers: observers)
            }
            return nil
        }
        // Refusals of carts nobody wants now, or old enough, are forgotten: asked again.
        let findRefused = withLock { state.refusals.plan(wanting: allWanted) }
        if findRefused, case .carts(let ids) = allWanted {
            // Which of the carts made the server refuse the subscription: each read alone.
            for id in ids.sorted() where read({ $0.refusals.error(of: id) == nil }) {
                try await readRefusing(id, api: api, observers: observers)
            }
        }
        let (loaded, covered, seq) = read { ($0.held.loaded, $0.held.covered, $0.held.seq) }
        var wanted = read { $0.refusals.served(allWanted) }
        guard loaded, let covered else {
            guard wanted != .carts([]) else { return everyCartRefused(observers) }
            withLock { state.held.startAnew(covering: wanted) }
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
                wanted = read { $0.refusals.served(allWanted) }
            }
        default:
            break
        }
        guard wanted != .carts([]) else { return everyCartRefused(observers) }
        withLock {
            let changed = state.held.covered != wanted
            state.held.cover(wanted, adding: fetched, readWhileCovering: covered)
            if changed {
                file?.saveAll(carts: state.held.carts, covered: wanted, seq: state.held.seq, databaseID: state.held.databaseID)
            }
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
                state.refusals.refuse(id, because: error)
                guard !state.lifecycle.closed, let store = store.withLockedValue(\.store) else { return }
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
            if let refusal = state.refusals.latest { setConnection(.refused(refusal.error), observers: observers) }
            state.held.forget()
        }
        return nil
    }

    /// Applies one update of the subscription and tells the observers.
    package func take(_ update: FanoutSubscription.Update, observers: RemoteCartStore.Observers) throws {
        try withLock {
            guard !state.lifecycle.closed else { return }
            switch update {
            case .connecting(let plan):
                if state.lifecycle.connection == .idle || state.lifecycle.connection == .live {
                    setConnection(.connecting, observers: observers)
                }
                connecting(plan, observers: observers)
            case .presence(let message, _):
                applyPresence(message, observers: observers)
            case .presenceRefused(let error):
                presenceUnavailable(error, observers: observers)
            case .welcome(let welcome):
                if state.held.isOtherDatabase(welcome.databaseID) {
                    // Another database than the one the carts are of: nothing after their seq
                    // can be trusted. A snapshot replaces them, and observers are told why.
                    let known = state.held.databaseID ?? ""
                    state.held.drop(because: .otherDatabase)
                    file?.forgetCarts()
                    throw ProtocolViolation(
                        description: "the server's database is \(welcome.databaseID ?? ""), the replica's carts are of \(known): read again"
                    )
                }
                state.held.welcomed(by: welcome.databaseID)
                setConnection(.live, observers: observers)
            case .snapshot(let snapshot, let reason):
                load(snapshot, reason: reason, observers: observers)
            case .event(let event, _):
                try apply(event, observers: observers)
            case .disconnected(let problem, _):
                setConnection(.reconnecting(problem), observers: observers)
            case .refused(let error, _):
                if error.code == .forbiddenCart, case .carts = state.held.covered, state.refusals.subscriptionRefused() {
                    // One of the carts asked for: find which, at once, and serve the others.
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
        guard let covered = state.held.covered, let (loadedCarts, resync) = state.held.load(snapshot, reason: reason) else { return }
        file?.saveAll(carts: loadedCarts, covered: covered, seq: snapshot.seq, databaseID: state.held.databaseID)
        if let resync, let store = store.withLockedValue(\.store) {
            observers.registry.notify(where: \.isLoaded) { observer, interest in
                observer.cartSource(store, didResync: Self.carts(of: interest.selection, in: loadedCarts), because: resync)
            }
        }
        greetWaiting(observers)
        settleAllPending(observers: observers)
        resumeSeqWaiters()
    }

    private func apply(_ event: CartEvent, observers: RemoteCartStore.Observers) throws {
        switch try state.held.apply(event) {
        case .notHeld:
            return
        case .already:
            file?.save(nil, seq: state.held.seq)
            settlePending(of: event.cartID, confirmedKey: event.idempotencyKey, observers: observers)
            resumeSeqWaiters()
        case .applied(let cart):
            file?.save(cart, seq: state.held.seq)
            defer { resumeSeqWaiters() }
            guard let store = store.withLockedValue(\.store) else { return }
            let id = event.cartID
            observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(id) }) { observer, _ in
                observer.cartSource(store, didApply: event, to: cart)
            }
            // The event of one of this store's writes confirms it, even before its answer comes.
            settlePending(of: id, confirmedKey: event.idempotencyKey, observers: observers)
        }
    }

    /// Tells every observer that was not told the state yet, and whose carts the replica now
    /// holds, their state. Under the lock.
    private func greetWaiting(_ observers: RemoteCartStore.Observers) {
        guard state.held.loaded, let covered = state.held.covered, let store = store.withLockedValue(\.store) else { return }
        let carts = state.held.carts
        let fromCache = state.held.fromCache
        let pending = Set(state.pending.entries.map(\.write.cartID)).sorted().map { cartID in
            let writes = state.pending.of(cartID)
            return (cartID: cartID, writes: writes, shown: state.held.shown(cartID, with: writes))
        }
        let presence = state.presence
        let refusals = state.refusals
        observers.registry.notify(where: { interest in
            let served = refusals.served(interest.selection)
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
            for (cartID, members, change) in presence.told(to: interest.selection) {
                observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
            }
        }
    }

    /// Closes the connection until `resume`: returns once the subscription's loop has let it go.
    func suspend() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            guard withLock({ state.lifecycle.suspend(waiter) }) else { return waiter.resume() }
            wakeUps.wake()
        }
    }

    /// Connects again at once after `suspend`, whatever pause the loop was in.
    func resume() {
        if withLock({ state.lifecycle.resume() }) { wakeUps.wake() }
    }

    /// Ends the loop's pause before its next attempt, if it is in one (the network is back):
    /// a live connection is left as it is.
    func retryNow() {
        if withLock({ state.lifecycle.isWaitingToRetry }) { wakeUps.wake() }
    }

    /// Tells every observer the store is closed (their last callback); those waiting for a
    /// suspension, a write's outcome or a seq are let go.
    func close(observers: RemoteCartStore.Observers) {
        withLock {
            guard !state.lifecycle.closed else { return }
            setConnection(.closed, observers: observers)
            for waiter in state.lifecycle.close() { waiter.resume() }
            state.pending.abandonWaiters()
            resumeSeqWaiters()
        }
    }

    private func setConnection(_ connection: RemoteCartStore.ConnectionState, observers: RemoteCartStore.Observers) {
        guard state.lifecycle.set(connection) else { return }
        guard let store = store.withLockedValue(\.store) else { return }
        observers.registry.notify { $0.cartSource(store, connectionDidChange: connection) }
    }

    static func carts(of selection: CartSelection, in carts: [String: Cart]) -> [Cart] {
        selection.carts(in: carts)
    }
}

typealias ObserverSetOfStore = WeakObserverSet<WeakRemoteCartObserver>

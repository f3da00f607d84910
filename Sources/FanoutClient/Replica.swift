import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import WeakObservers

/// The carts a `RemoteCartStore` holds, and what it tells its observers as they change.
///
/// One lock (recursive: an observer called without a queue runs under it and may read the
/// store, or add and remove observers) makes "apply a message, then notify" one step, and
/// "add an observer, then tell it the state" another: an observer added at any moment gets the
/// state, then exactly the later events.
final class Replica: @unchecked Sendable {
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
    }

    private let lock = NSRecursiveLock()
    private var state = State()
    let store = NIOLockedValueBox(WeakStore())

    /// Named carts above this many are read with one `GET /carts` rather than one request each.
    static let fetchOneByOneLimit = 20

    func read<T>(_ body: (State) -> T) -> T {
        lock.withLock { body(state) }
    }

    /// The state, for `RemoteCartStore.applyForBenchmark` only.
    func lockedForBenchmark(_ body: (inout State) -> Void) {
        lock.withLock { body(&state) }
    }

    /// Runs `body` under the lock: an observer being added. `body` returns whether the replica
    /// must widen to serve it.
    func admit(_ body: (Replica) -> Bool) -> Bool {
        lock.withLock { body(self) }
    }

    /// Tells a newly added observer the state, if the replica holds its carts. Under the lock.
    /// Returns whether the replica does not cover them (it must widen).
    func greet(_ observer: any RemoteCartObserver, _ interest: ObserverInterest, in set: ObserverSetOfStore) -> Bool {
        guard let covered = state.covered, covered.covers(interest.selection) else { return true }
        guard state.loaded, let store = store.withLockedValue(\.store) else { return false }
        interest.markLoaded()
        let carts = Self.carts(of: interest.selection, in: state.carts)
        set.notify(only: observer) { $0.remoteStore(store, didLoad: carts) }
        return false
    }

    /// Whether the replica holds carts no living observer wants (or a connection with no
    /// observer at all): time to narrow.
    func outlivesItsObservers(_ observers: RemoteCartStore.Observers) -> Bool {
        let wanted = observers.wanted
        return lock.withLock { state.covered != nil && state.covered != wanted }
    }

    /// The next connection's plan: what the living observers want, after the replica's seq.
    /// Carts they want that the replica does not hold are read over HTTP first (their state is
    /// then at or after the seq; replayed events at or below their version are skipped).
    func plan(for observers: RemoteCartStore.Observers, api: CartServerAPI) async throws -> FanoutSubscription.Plan? {
        guard let wanted = observers.wanted else {
            lock.withLock {
                state = State(connection: state.connection)
                setConnection(.idle, observers: observers)
            }
            return nil
        }
        let (loaded, covered, seq) = read { ($0.loaded, $0.covered, $0.seq) }
        guard loaded, let covered else {
            lock.withLock {
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
                for id in missing.sorted() { fetched.append(try await api.currentCart(id)) }
            }
        default:
            break
        }
        lock.withLock {
            for cart in fetched where !covered.contains(cart.id) { state.carts[cart.id] = cart }
            state.carts = state.carts.filter { wanted.contains($0.key) }
            state.covered = wanted
            greetWaiting(observers)
        }
        return FanoutSubscription.Plan(carts: wanted.subscription, since: seq)
    }

    /// Applies one update of the subscription and tells the observers.
    func take(_ update: FanoutSubscription.Update, observers: RemoteCartStore.Observers) throws {
        try lock.withLock {
            switch update {
            case .connecting:
                if state.connection == .idle || state.connection == .live { setConnection(.connecting, observers: observers) }
            case .welcome:
                setConnection(.live, observers: observers)
            case .snapshot(let snapshot, let reason):
                load(snapshot, reason: reason, observers: observers)
            case .event(let event, _):
                try apply(event, observers: observers)
            case .disconnected(let why, _):
                setConnection(.reconnecting(after: why), observers: observers)
            case .refused(let error, _):
                setConnection(.refused(error), observers: observers)
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
        if let resync, wasLoaded || resync == .inconsistent, let store = store.withLockedValue(\.store) {
            observers.registry.notify(where: \.isLoaded) { observer, interest in
                observer.remoteStore(store, didResync: Self.carts(of: interest.selection, in: loadedCarts), because: resync)
            }
        }
        greetWaiting(observers)
    }

    private func apply(_ event: CartEvent, observers: RemoteCartStore.Observers) throws {
        guard state.loaded, state.covered?.contains(event.cartID) == true else { return }
        var cart = state.carts[event.cartID] ?? Cart(id: event.cartID)
        // Already applied (replayed after a resubscription, or its state was read over HTTP).
        guard event.version > cart.version else {
            state.seq = max(state.seq, event.seq)
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
        guard let store = store.withLockedValue(\.store) else { return }
        let id = event.cartID
        let after = cart
        observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(id) }) { observer, _ in
            observer.remoteStore(store, didApply: event, to: after)
        }
    }

    /// Tells every observer that was not told the state yet, and whose carts the replica now
    /// holds, their state. Under the lock.
    private func greetWaiting(_ observers: RemoteCartStore.Observers) {
        guard state.loaded, let covered = state.covered, let store = store.withLockedValue(\.store) else { return }
        let carts = state.carts
        observers.registry.notify(where: { interest in
            guard !interest.isLoaded, covered.covers(interest.selection) else { return false }
            interest.markLoaded()
            return true
        }) { observer, interest in
            observer.remoteStore(store, didLoad: Self.carts(of: interest.selection, in: carts))
        }
    }

    private func setConnection(_ connection: RemoteCartStore.ConnectionState, observers: RemoteCartStore.Observers) {
        guard state.connection != connection else { return }
        state.connection = connection
        guard let store = store.withLockedValue(\.store) else { return }
        observers.registry.notify { $0.remoteStore(store, connectionDidChange: connection) }
    }

    static func carts(of selection: CartSelection, in carts: [String: Cart]) -> [Cart] {
        switch selection {
        case .all: carts.values.sorted { $0.id < $1.id }
        case .carts(let ids): ids.sorted().compactMap { carts[$0] }
        }
    }
}

typealias ObserverSetOfStore = WeakObserverSet<WeakRemoteCartObserver>

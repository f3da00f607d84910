import FanoutProtocol
import NIOConcurrencyHelpers
import WeakObservers

/// One `CartObserver` of a `CartStore` on its way to the present: its carts' state is read from
/// the database (never holding up the writer), the commits delivered meanwhile wait here, and
/// once the state is told they follow it, each once, in seq order; then the writer calls it
/// directly.
///
/// Phases, under one lock that the writer takes for a moment per event:
/// - `reading`: the state is being read (as of some seq S). Commits of its carts wait, at most
///   `limit` (`CartStore.followerBufferLimit`); past that they are dropped and the newest dropped seq
///   noted: a state older than it is read again.
/// - `draining`: the state at S was told; the waiting commits after S are being told, in
///   batches taken off the list, while the writer adds to it. An empty list makes it `live` in
///   the same step, so the writer's next call comes after the last batch.
/// - `live`: the writer tells it each commit after its cursor (commits at or before S, which
///   the state holds, are skipped: on PostgreSQL a state can be ahead of delivery).
/// - `closed`: the store closed; nothing more.
final class CartFeed: Sendable {
    enum Phase {
        case reading, draining, live, closed
    }

    struct State {
        var phase = Phase.reading
        /// Commits of its carts delivered while reading or draining, in seq order.
        var waiting: [CartEvent] = []
        /// The newest commit dropped past the bound since the state was last read.
        var droppedThrough: Int64?
        /// Every commit up to it is in what the observer was told.
        var cursor: Int64 = 0
        /// Its carts as of `cursor`: what `didApply` hands with each event.
        var carts: [String: Cart] = [:]
        /// Whether it was told a state: a later one is a resync.
        var told = false
    }

    let selection: CartSelection
    /// The most commits that wait (`CartStore.followerBufferLimit`).
    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(_ selection: CartSelection, limit: Int) {
        self.selection = selection
        self.limit = limit
    }

    /// The writer's part, for each committed event in seq order: nil while the feed waits
    /// (the event is kept, or dropped past the bound) or when the event is not its; otherwise
    /// its cart after the event. `after` carries that cart from one live feed to the next:
    /// every live feed holds the same cart before the event.
    func take(_ event: CartEvent, after: inout Cart?) -> Cart? {
        guard selection.contains(event.cartID) else { return nil }
        return state.withLockedValue { state in
            switch state.phase {
            case .reading, .draining:
                if state.waiting.count >= limit {
                    state.waiting.removeAll()
                    state.droppedThrough = event.seq
                } else {
                    state.waiting.append(event)
                }
                return nil
            case .live:
                return state.apply(event, after: &after)
            case .closed:
                return nil
            }
        }
    }

    /// The store closed: nothing more is taken or told. Returns whether it was not closed yet.
    func close() -> Bool {
        state.withLockedValue { state in
            defer { state.phase = .closed }
            return state.phase != .closed
        }
    }

    /// Reads the state and tells it, then the commits that waited, until the feed is live; again
    /// while commits are dropped past the bound. A failed read is tried again (0.1 s, doubling
    /// to 5 s) while the observer is registered with this feed and the store is open.
    func catchUp(
        observer hold: CartObserverHold, in followers: WeakObserverSet<WeakLocalCartObserver>,
        store storeNow: @Sendable () -> CartStore?, afterRead: @Sendable () async -> Void = {}
    ) async {
        var pause = Duration.milliseconds(100)
        while true {
            // Stop once the observer is gone, removed, or registered again (with a new feed). It
            // is not held across the read: released meanwhile, it is gone at once.
            guard hold.observer.map({ followers.interest(of: $0) === self }) == true,
                let store = storeNow(), !store.observers.isClosed
            else { return }
            let snapshot: CartSnapshot
            do {
                snapshot = try await read(from: store)
            } catch {
                try? await Task.sleep(for: pause)
                pause = min(pause * 2, .seconds(5))
                continue
            }
            pause = .milliseconds(100)
            await afterRead()
            guard let told = load(snapshot) else { continue }
            guard let observer = hold.observer else { return }
            let isMine: (CartFeed) -> Bool = { [self] in $0 === self }
            switch told {
            case .loaded(let carts):
                followers.notify(only: observer, where: isMine) { $0.cartSource(store, didLoad: carts) }
            case .resynced(let carts):
                followers.notify(only: observer, where: isMine) { $0.cartSource(store, didResync: carts, because: .fellBehind) }
            case .closed:
                return
            }
            // The commits that waited, batch by batch, until none waits: then it is live.
            while let batch = nextBatch() {
                for (event, cart) in batch {
                    followers.notify(only: observer, where: isMine) { $0.cartSource(store, didApply: event, to: cart) }
                }
            }
            guard needsReading else { return }
        }
    }

    private func read(from store: CartStore) async throws -> CartSnapshot {
        guard case .carts(let ids) = selection else { return try await store.snapshot() }
        // An id no cart can have is never read (it would fail every time): it stays empty.
        let readable = ids.filter { (try? CartLimits.checkCartID($0)) != nil }
        guard !readable.isEmpty else { return CartSnapshot(carts: [], seq: 0) }
        return try await store.snapshot(of: readable)
    }

    enum Told {
        case loaded([Cart])
        case resynced([Cart])
        case closed
    }

    /// Takes the state read: nil if commits after it were dropped (read again). Otherwise the
    /// feed drains from it, and this is what to tell.
    private func load(_ snapshot: CartSnapshot) -> Told? {
        state.withLockedValue { state in
            guard state.phase == .reading else { return .closed }
            if let dropped = state.droppedThrough, dropped > snapshot.seq { return nil }
            var carts: [String: Cart] = [:]
            if case .carts(let ids) = selection {
                for id in ids { carts[id] = Cart(id: id) }
            }
            for cart in snapshot.carts where selection.contains(cart.id) { carts[cart.id] = cart }
            state.carts = carts
            state.cursor = snapshot.seq
            state.droppedThrough = nil
            state.phase = .draining
            let told = selection.carts(in: carts)
            defer { state.told = true }
            return state.told ? .resynced(told) : .loaded(told)
        }
    }

    /// The commits that waited, with their carts after them; nil once none waits (the feed is
    /// then live), or when commits were dropped meanwhile (the feed reads again), or closed.
    private func nextBatch() -> [(CartEvent, Cart)]? {
        state.withLockedValue { state in
            guard state.phase == .draining else { return nil }
            if state.droppedThrough != nil {
                state.waiting.removeAll()
                state.phase = .reading
                return nil
            }
            guard !state.waiting.isEmpty else {
                state.phase = .live
                return nil
            }
            let events = state.waiting
            state.waiting.removeAll()
            var batch: [(CartEvent, Cart)] = []
            for event in events {
                var after: Cart?
                if let cart = state.apply(event, after: &after) { batch.append((event, cart)) }
            }
            return batch
        }
    }

    private var needsReading: Bool {
        state.withLockedValue { $0.phase == .reading }
    }
}

extension CartFeed.State {
    /// Applies a commit after the cursor to its cart: the cart after it; nil for one the state
    /// already holds.
    mutating func apply(_ event: CartEvent, after: inout Cart?) -> Cart? {
        guard event.seq > cursor else { return nil }
        cursor = event.seq
        let cart: Cart
        if let shared = after, shared.id == event.cartID, shared.version == event.version {
            cart = shared
        } else {
            var mine = carts[event.cartID] ?? Cart(id: event.cartID)
            mine.apply(event)
            cart = mine
            after = cart
        }
        carts[event.cartID] = cart
        return cart
    }
}

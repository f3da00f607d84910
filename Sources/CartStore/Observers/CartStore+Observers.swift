import Dispatch
import NIOConcurrencyHelpers
import WeakObservers

extension CartStore {
    /// The observers of a `CartStore`, held weakly: `CartObserver`s (the same protocol a
    /// `RemoteCartStore`'s observers follow), each told its carts' state when added and then
    /// every change of them; and `CartStoreObserver`s, the low-level hook that hears every
    /// commit and may validate.
    public final class Observers: CartObserverSet {
        /// The `CartStoreObserver`s: every commit, and validators.
        let commits = ObserverSet()
        /// The `CartObserver`s, each with its `CartFeed`.
        let followers = WeakObserverSet<WeakLocalCartObserver>()
        /// The store, once it is built; weakly: the store holds its observers.
        private let store = NIOLockedValueBox<WeakCartStore>(WeakCartStore())
        /// Set by `CartStore.close()`: nothing more is read or told.
        private let closed = NIOLockedValueBox(false)
        /// The most commits that wait for one follower being caught up (tests make it small).
        let followerBufferLimit = NIOLockedValueBox(CartStore.followerBufferLimit)
        /// Tests only: awaited after each read of a follower's state, before it is taken (so
        /// that commits can be made in between), and the number of such reads.
        let afterStateRead = NIOLockedValueBox<(@Sendable () async -> Void)?>(nil)
        let statesRead = NIOLockedValueBox(0)

        init() {}

        func attach(to store: CartStore) {
            self.store.withLockedValue { $0 = WeakCartStore(store: store) }
        }

        /// Adds `observer`, held weakly, to hear every commit (and validate changes): the
        /// low-level hook a server's fan-out uses. It gets no state when added, and every cart.
        ///
        /// - Parameters:
        ///   - observer: held weakly.
        ///   - queue: a serial queue to deliver on, in order; `nil` calls it on the writer's
        ///     thread, before the mutation returns.
        public func add(_ observer: any CartStoreObserver, queue: DispatchQueue? = nil) {
            commits.add(observer, queue: queue)
        }

        /// Removes `observer`: after this returns it gets no further callback.
        public func remove(_ observer: any CartStoreObserver) {
            commits.remove(observer)
        }

        /// Whether `observer` is in the set.
        public func contains(_ observer: any CartStoreObserver) -> Bool {
            commits.contains(observer)
        }

        /// Adds `observer`, held weakly, for `carts`: it is told their state as of some seq
        /// (read from the database without holding up the writer), then exactly the events of
        /// its carts after that seq, once each, in seq order. Adding it again replaces its
        /// registration, and it is told the state again. After `close()` it gets no callback.
        ///
        /// Commits made while the state is being read wait for it, at most
        /// `CartStore.followerBufferLimit` per observer: past that they are dropped and the
        /// state read again (told as `didLoad` if the observer has had nothing yet, as
        /// `didResync(_, .fellBehind)` otherwise), so it never sees a gap.
        ///
        /// - Parameters:
        ///   - observer: held weakly.
        ///   - carts: the carts it wants: `.only([...])`, or `.all`.
        ///   - queue: a serial queue to call it on, in order; `nil` calls it on the thread that
        ///     delivers events (SQLite's writer; on PostgreSQL an event loop of SwiftNIO's
        ///     that serves connections too: such an observer must return at once), and on the
        ///     thread that read the state for the state.
        public func add(_ observer: any CartObserver, carts: CartSelection, queue: DispatchQueue?) {
            guard !closed.withLockedValue({ $0 }) else { return }
            let feed = CartFeed(carts, limit: followerBufferLimit.withLockedValue { $0 })
            followers.add(observer, queue: queue, interest: feed)
            let hold = CartObserverHold(observer)
            let followers = followers
            let store = store
            Task.detached { [self] in
                await feed.catchUp(observer: hold, in: followers, store: { store.withLockedValue(\.store) }) {
                    statesRead.withLockedValue { $0 += 1 }
                    await afterStateRead.withLockedValue { $0 }?()
                }
            }
        }

        /// Removes `observer`: after this returns it gets no further callback (not even one
        /// queued on its queue).
        public func remove(_ observer: any CartObserver) {
            followers.remove(observer)
        }

        /// Whether `observer` is in the set.
        public func contains(_ observer: any CartObserver) -> Bool {
            followers.contains(observer)
        }

        /// The number of live observers of both kinds (O(n): released ones are swept first).
        public var count: Int { commits.count + followers.count }

        /// Asks the validators about a change; the first throw refuses it.
        func validate(_ proposal: CartChangeProposal, store: CartStore) throws {
            try commits.forEachNow { try $0.cartStore(store, validate: proposal) }
        }

        /// Tells every observer of a committed event: in seq order, once per event.
        func deliver(_ event: CartEvent, from store: CartStore) {
            commits.notify { observer in
                observer.cartStore(store, didCommit: event)
            }
            // Every follower that is live holds the same cart before this event: the first one
            // applies it, the others take the result.
            var after: Cart?
            followers.notify(choosing: { feed in feed.take(event, after: &after) }) { observer, cart in
                observer.cartSource(store, didApply: event, to: cart)
            }
        }

        /// The store closed: every `CartObserver` is told `closed`, its last callback.
        func close(store: CartStore) {
            let wasClosed = closed.withLockedValue { closed in
                defer { closed = true }
                return closed
            }
            guard !wasClosed else { return }
            followers.notify(where: { feed in feed.close() }) { observer, _ in
                observer.cartSource(store, connectionDidChange: .closed)
            }
        }

        var isClosed: Bool { closed.withLockedValue { $0 } }
    }
}

/// Lets the observers hand the store to their catch-ups without keeping it alive.
struct WeakCartStore: Sendable {
    weak var store: CartStore?
}

/// How `CartStore.Observers` holds a `CartObserver`, with its `CartFeed`.
typealias WeakLocalCartObserver = WeakCartObserver<CartFeed>

import WeakObservers

/// The low-level hook on a `CartStore`: every commit of every cart, and validators. Held weakly
/// by the store.
///
/// An app's view wants a `CartObserver` instead (its carts' state when added, then their
/// changes, as a `RemoteCartStore` gives them). This one gets no state when added and every
/// cart: it is what `fanout-server`'s hub is, which catches its subscribers up from the log
/// itself, and what a validator is, which must answer inside the transaction.
///
/// Register with `store.observers.add(observer)` (optionally with a delivery queue) and keep
/// the observer alive yourself: when you release it, it drops out of the store by itself.
///
/// Callbacks run while the store serialises its writes: keep them short, and never block them
/// waiting for the store (a synchronous callback cannot `await` it anyway). An observer that
/// needs to read or write the store in reaction to an event should take a delivery queue.
public protocol CartStoreObserver: AnyObject, Sendable {
    /// Called once per committed event, in seq order, only after the commit.
    func cartStore(_ store: CartStore, didCommit event: CartEvent)

    /// Called inside the write transaction, before commit, on the writing thread (whatever
    /// delivery queue the observer has). Throwing vetoes the change: the transaction rolls back,
    /// the caller of the mutation gets the thrown error, and no observer sees an event.
    func cartStore(_ store: CartStore, validate proposal: CartChangeProposal) throws
}

extension CartStoreObserver {
    /// Accepts every change.
    public func cartStore(_ store: CartStore, validate proposal: CartChangeProposal) throws {}
}

/// A change about to be committed, shown to validators.
public struct CartChangeProposal: Sendable, Hashable {
    public var cartID: String
    public var change: CartChange
    /// The cart before the change (version 0 and no items for a new cart).
    public var before: Cart
    /// The cart as it will be if the change commits.
    public var after: Cart
}

/// The `CartStoreObserver`s of a `CartStore`, held weakly (`WeakObserverSet`, shared with
/// FanoutClient): part of `CartStore.Observers`.
public typealias ObserverSet = WeakObserverSet<WeakCartStoreObserver>

/// How `ObserverSet` holds a `CartStoreObserver`: weakly.
public struct WeakCartStoreObserver: WeakObserverReference {
    public weak var observer: (any CartStoreObserver)?
    public init(_ observer: any CartStoreObserver) { self.observer = observer }
    public static func identity(of observer: any CartStoreObserver) -> ObjectIdentifier { ObjectIdentifier(observer) }
}

import Dispatch

/// Carts that `CartObserver`s follow: an in-process `CartStore` or a `RemoteCartStore`. A view
/// model written against it attaches to a local store in tests and to a server's in the app.
public protocol CartSource: AnyObject, Sendable {
    associatedtype Observers: CartObserverSet
    /// Its observers, held weakly, each with the carts it wants.
    var observers: Observers { get }
    /// How it reaches its carts now (a `CartStore`: `live` until closed).
    var connectionState: CartConnectionState { get }
}

/// The observers of a `CartSource`, held weakly, each with the carts it wants.
///
/// Each promises: an observer added at any moment is told its carts' state first, then
/// exactly the later events of its carts, once, in seq order, on its queue (the main actor for
/// a `MainActorCartObserver`). Released, it drops out by itself; once `remove` returns it gets
/// no further callback, not even one already queued.
public protocol CartObserverSet: Sendable {
    /// Adds `observer`, held weakly, for `carts`, called on `queue` (serial, in order; `nil`:
    /// on the source's own thread). Adding it again replaces its registration, and it is told
    /// the state again.
    func add(_ observer: any CartObserver, carts: CartSelection, queue: DispatchQueue?)
    /// Removes `observer`: after this returns it gets no further callback.
    func remove(_ observer: any CartObserver)
    /// Whether `observer` is in the set.
    func contains(_ observer: any CartObserver) -> Bool
}

extension CartObserverSet {
    /// Adds `observer`, held weakly, for `carts`, called on the source's own thread.
    public func add(_ observer: any CartObserver, carts: CartSelection = .all) {
        add(observer, carts: carts, queue: nil)
    }

    /// Adds a main-actor `observer`, held weakly, for `carts`: it is called on the main actor,
    /// in order, told the state first.
    public func add(_ observer: any MainActorCartObserver, carts: CartSelection = .all) {
        add(MainActorRelay(observer), carts: carts, queue: .main)
    }

    /// Removes a main-actor `observer`: after this returns it gets no further callback.
    public func remove(_ observer: any MainActorCartObserver) {
        remove(MainActorRelay(observer))
    }

    /// Whether a main-actor `observer` is in the set.
    public func contains(_ observer: any MainActorCartObserver) -> Bool {
        contains(MainActorRelay(observer))
    }
}

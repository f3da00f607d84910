import Dispatch
import FanoutProtocol

/// An observer of a `RemoteCartStore` that lives on the main actor — a view model, the model
/// behind a SwiftUI view — called on the main actor, in seq order, with no queue to give.
///
/// Conform a `@MainActor` class and add it with `store.observers.add(model, carts:)`; keep it
/// alive yourself (a view model, `@State`): released, it drops out by itself like any observer.
/// The callbacks are those of `RemoteCartObserver`, each optional, with the same promises.
@MainActor
public protocol MainActorRemoteCartObserver: AnyObject, Sendable {
    /// The carts this observer asked for, as they are now: its first callback.
    func remoteStore(_ store: RemoteCartStore, didLoad carts: [Cart])
    /// An event was applied to one of this observer's carts; `cart` is the cart after it.
    func remoteStore(_ store: RemoteCartStore, didApply event: CartEvent, to cart: Cart)
    /// The replica was replaced by the server's snapshot (`carts` are this observer's).
    func remoteStore(_ store: RemoteCartStore, didResync carts: [Cart], because reason: ResyncReason)
    /// The connection to the server changed.
    func remoteStore(_ store: RemoteCartStore, connectionDidChange state: RemoteCartStore.ConnectionState)
    /// The server refused some of this observer's carts to the store's credentials.
    func remoteStore(_ store: RemoteCartStore, didRefuse carts: [String], because error: RemoteStoreError)
}

extension MainActorRemoteCartObserver {
    public func remoteStore(_ store: RemoteCartStore, didLoad carts: [Cart]) {}
    public func remoteStore(_ store: RemoteCartStore, didApply event: CartEvent, to cart: Cart) {}
    public func remoteStore(_ store: RemoteCartStore, didResync carts: [Cart], because reason: ResyncReason) {}
    public func remoteStore(_ store: RemoteCartStore, connectionDidChange state: RemoteCartStore.ConnectionState) {}
    public func remoteStore(_ store: RemoteCartStore, didRefuse carts: [String], because error: RemoteStoreError) {}
}

extension RemoteCartStore.Observers {
    /// Adds a main-actor `observer`, held weakly, for `carts`: it is called on the main actor,
    /// in order, and told the state first, as `add(_:carts:queue:)` promises.
    public func add(_ observer: any MainActorRemoteCartObserver, carts: CartSelection = .all) {
        add(MainActorRelay(observer), carts: carts, queue: .main)
    }

    /// Removes a main-actor `observer`: after this returns it gets no further callback.
    public func remove(_ observer: any MainActorRemoteCartObserver) {
        remove(MainActorRelay(observer))
    }

    public func contains(_ observer: any MainActorRemoteCartObserver) -> Bool {
        contains(MainActorRelay(observer))
    }
}

/// What the observer set holds for a main-actor observer: called on the main queue (the main
/// actor's), it calls its target there. The set holds the relay as long as its target lives,
/// and knows it by its target's identity.
final class MainActorRelay: RemoteCartObserver {
    weak let target: (any MainActorRemoteCartObserver)?
    let targetID: ObjectIdentifier

    init(_ target: any MainActorRemoteCartObserver) {
        self.target = target
        targetID = ObjectIdentifier(target)
    }

    /// Runs `body` with the target, on the main actor: the relay is registered with the main
    /// queue, which is the main actor's.
    private func call(_ body: @MainActor (any MainActorRemoteCartObserver) -> Void) {
        dispatchPrecondition(condition: .onQueue(.main))
        MainActor.assumeIsolated {
            if let target { body(target) }
        }
    }

    func remoteStore(_ store: RemoteCartStore, didLoad carts: [Cart]) {
        call { $0.remoteStore(store, didLoad: carts) }
    }
    func remoteStore(_ store: RemoteCartStore, didApply event: CartEvent, to cart: Cart) {
        call { $0.remoteStore(store, didApply: event, to: cart) }
    }
    func remoteStore(_ store: RemoteCartStore, didResync carts: [Cart], because reason: ResyncReason) {
        call { $0.remoteStore(store, didResync: carts, because: reason) }
    }
    func remoteStore(_ store: RemoteCartStore, connectionDidChange state: RemoteCartStore.ConnectionState) {
        call { $0.remoteStore(store, connectionDidChange: state) }
    }
    func remoteStore(_ store: RemoteCartStore, didRefuse carts: [String], because error: RemoteStoreError) {
        call { $0.remoteStore(store, didRefuse: carts, because: error) }
    }
}

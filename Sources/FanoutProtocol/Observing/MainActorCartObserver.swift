import Dispatch

/// A `CartObserver` that lives on the main actor — a view model, the model behind a SwiftUI
/// view — called on the main actor, in seq order, with no queue to give.
///
/// Conform a `@MainActor` class and add it with `source.observers.add(model, carts:)`, to a
/// `CartStore` or a `RemoteCartStore`; keep it alive yourself (a view model, `@State`):
/// released, it drops out by itself like any observer. The callbacks are those of
/// `CartObserver`, each optional, with the same promises.
@MainActor
public protocol MainActorCartObserver: AnyObject, Sendable {
    /// The carts this observer asked for, as they are now: its first callback about them.
    func cartSource(_ source: any CartSource, didLoad carts: [Cart])
    /// Its carts as a `RemoteCartStore`'s cache file kept them, before any network (by
    /// default, `didLoad`).
    func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart])
    /// An event was committed to one of this observer's carts; `cart` is the cart after it.
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart)
    /// The observer's carts were replaced by their state as it is now (`carts`), and why.
    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason)
    /// How the source reaches its carts changed.
    func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState)
    /// A server refused some of this observer's carts to the store's credentials.
    func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError)
    /// The store's unconfirmed writes to one of its carts changed; `cart` is what to show.
    func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart)
    /// The server refused a write for good: it is rolled back.
    func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError)
    /// The presence of one of its carts changed (a `RemoteCartStore` made with presence only).
    func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange)
}

extension MainActorCartObserver {
    public func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {}
    public func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart]) { cartSource(source, didLoad: carts) }
    public func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {}
    public func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {}
    public func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {}
    public func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {}
    public func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {}
    public func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {}
    public func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange)
    {}
}

/// What an observer set holds for a main-actor observer: registered with the main queue (the
/// main actor's), it calls its target there. Held as long as its target lives, and known by
/// its target's identity (`CartObserverHold`).
package final class MainActorRelay: CartObserver {
    package weak let target: (any MainActorCartObserver)?
    package let targetID: ObjectIdentifier

    package init(_ target: any MainActorCartObserver) {
        self.target = target
        targetID = ObjectIdentifier(target)
    }

    /// Runs `body` with the target, on the main actor: the relay is registered with the main
    /// queue, which is the main actor's.
    private func call(_ body: @MainActor (any MainActorCartObserver) -> Void) {
        dispatchPrecondition(condition: .onQueue(.main))
        MainActor.assumeIsolated {
            if let target { body(target) }
        }
    }

    package func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        call { $0.cartSource(source, didLoad: carts) }
    }
    package func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart]) {
        call { $0.cartSource(source, didLoadFromCache: carts) }
    }
    package func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
        call { $0.cartSource(source, didApply: event, to: cart) }
    }
    package func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        call { $0.cartSource(source, didResync: carts, because: reason) }
    }
    package func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {
        call { $0.cartSource(source, connectionDidChange: state) }
    }
    package func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {
        call { $0.cartSource(source, didRefuse: carts, because: error) }
    }
    package func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        call { $0.cartSource(source, didChangePending: pending, showing: cart) }
    }
    package func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
        call { $0.cartSource(source, didReject: write, because: error) }
    }
    package func cartSource(
        _ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange
    ) {
        call { $0.cartSource(source, didChangePresence: members, of: cartID, change: change) }
    }
}

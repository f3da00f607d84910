import WeakObservers

/// An observer of carts, written once for any `CartSource`: an in-process `CartStore` or a
/// `RemoteCartStore`. Held weakly by the source, as a delegate is.
///
/// Add it with `source.observers.add(observer, carts: .only(["alice"]), queue: queue)` and keep
/// it alive yourself: when you release it, it drops out by itself. Its first callback about the
/// carts is `didLoad`, their state as of some seq; then every later change of its carts comes,
/// once, in seq order, with none missing between (or `didResync` with the carts as they are,
/// and why). Every method has a default that does nothing: implement the ones you need.
///
/// Without a queue, callbacks run on the source's own thread (a store's writer, a remote
/// store's receiving task): keep them short. A view model takes `MainActorCartObserver`.
public protocol CartObserver: AnyObject, Sendable {
    /// The carts this observer asked for, as they are now: its first callback about them.
    /// A named cart that was never changed is empty at version 0; with `.all`, every cart that
    /// exists.
    func cartSource(_ source: any CartSource, didLoad carts: [Cart])

    /// The carts this observer asked for as a `RemoteCartStore` kept them in its cache file,
    /// before any network: its first callback about them when the store was restored from the
    /// file. The store then resumes from their seq: the events since follow (or `didResync`,
    /// with the reason, when the server cannot resume it), and `connectionDidChange(.live)`
    /// says the server is reached. By default, `didLoad`.
    func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart])

    /// An event was committed to one of this observer's carts; `cart` is the cart after it.
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart)

    /// The observer's carts (`carts`) were replaced by their state as it is now, because the
    /// events it missed could not be given to it. Later events follow these carts.
    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason)

    /// How the source reaches its carts changed (a remote store's connection; a `CartStore`
    /// tells only `closed`).
    func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState)

    /// A server refused some of this observer's carts to the store's credentials (a cart the
    /// token's `carts` claim does not name: `forbidden_cart`). They are left out: no state or
    /// event of them comes, while its other carts, and other observers, are served as usual.
    /// A `CartStore` never refuses.
    func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError)

    /// The store's writes to one of this observer's carts that the server has not confirmed
    /// changed: one was made, confirmed (its event applied: `didApply` came first), or refused.
    /// `cart` is what the app shows: the confirmed cart with `pending` applied in order. When
    /// `pending` is empty, `cart` is the confirmed cart again. Only a `RemoteCartStore` has
    /// pending writes (its `addItem`, `setQuantity`, `removeItem`, `clear`).
    func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart)

    /// The server refused `write` for good (a version conflict, a cart outside the token's
    /// claim, a rule such as a line that is not there): it is rolled back, and
    /// `didChangePending` follows with the cart without it. Later writes go on.
    func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError)

    /// The presence of one of this observer's carts changed: who else is looking at it.
    /// `members` are those on the cart now, oldest first, the store's own member included (its
    /// `presenceKey`). Only a `RemoteCartStore` made with presence tells it, and only to
    /// observers loaded with the cart (after `didLoad`); a `CartStore` has no presence and
    /// never calls it.
    func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange)
}

extension CartObserver {
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

/// How a source's weak observer set holds a `CartObserver`: weakly; or, for a main-actor
/// observer, its `MainActorRelay` strongly, standing for its target (held weakly) until the
/// target is released, and known by the target's identity.
package struct CartObserverHold: Sendable {
    private weak var plain: (any CartObserver)?
    private let relay: MainActorRelay?

    package init(_ observer: any CartObserver) {
        relay = observer as? MainActorRelay
        plain = relay == nil ? observer : nil
    }

    package var observer: (any CartObserver)? {
        guard let relay else { return plain }
        return relay.target == nil ? nil : relay
    }

    package static func identity(of observer: any CartObserver) -> ObjectIdentifier {
        (observer as? MainActorRelay)?.targetID ?? ObjectIdentifier(observer)
    }
}

/// How a store's `WeakObserverSet` holds a `CartObserver` (`CartObserverHold`: weakly, or a
/// main-actor observer's relay strongly while its target lives), with what the store keeps per
/// observer (`Interest`: a `CartStore`'s `CartFeed`, a `RemoteCartStore`'s `ObserverInterest`).
package struct WeakCartObserver<Interest: Sendable>: WeakObserverReference {
    private let hold: CartObserverHold

    package init(_ observer: any CartObserver) { hold = CartObserverHold(observer) }

    package var observer: (any CartObserver)? { hold.observer }

    package static func identity(of observer: any CartObserver) -> ObjectIdentifier { CartObserverHold.identity(of: observer) }
}

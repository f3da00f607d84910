import FanoutProtocol
import Observation

/// Carts of a `CartSource` — a `RemoteCartStore`, or an in-process `CartStore` — as a SwiftUI
/// view reads them: an `@Observable` object on the main actor whose `carts`, `connection`,
/// refusals and `presence` change as the store's callbacks come.
///
/// ```swift
/// @State private var basket = ObservedCarts(store, carts: .only(["alice"]))
/// var body: some View { Text(basket.cart?.totalCents.formatted() ?? "…") }
/// ```
///
/// It is an observer like any other: held weakly by the store, so keep it (`@State`, a view
/// model); released, it drops out, and the store stops fetching carts nobody else wants.
@MainActor
@Observable
public final class ObservedCarts: MainActorCartObserver {
    /// The carts it follows.
    public let selection: CartSelection
    /// Its carts as they are now, by id (those the server refused are absent); empty until
    /// `isLoaded`.
    public private(set) var carts: [Cart] = []
    /// Whether the store has told it its carts' state yet.
    public private(set) var isLoaded = false
    /// Whether `carts` are as the store's cache file kept them, the server not reached yet since
    /// (false once the connection is `live`).
    public private(set) var isFromCache = false
    /// The store's connection.
    public private(set) var connection: CartConnectionState
    /// Carts the server refused to the store's credentials, and why.
    public private(set) var refused: [String: RemoteStoreError] = [:]
    /// Why the carts were last replaced by a snapshot instead of receiving the events they
    /// missed; nil if they never were.
    public private(set) var lastResync: ResyncReason?
    /// The store's writes to its carts that the server has not confirmed, by cart (a cart
    /// without any is absent). `carts` shows them applied.
    public private(set) var pending: [String: [PendingWrite]] = [:]
    /// The last write of its carts the server refused (rolled back), and why.
    public private(set) var lastRejection: (write: PendingWrite, error: RemoteStoreError)?
    /// Who is looking at each of its carts now, oldest first, the store's own member included
    /// (a `RemoteCartStore` made with presence; a cart whose presence is not known is absent).
    public private(set) var presence: [String: [PresenceMember]] = [:]
    /// Carts the store follows without presence, and why (`presence_full`, …).
    public private(set) var presenceUnavailable: [String: RemoteStoreError] = [:]

    /// Whether one of its carts has writes the server has not confirmed.
    public var hasPendingWrites: Bool { !pending.isEmpty }

    /// Follows `carts` of `store` (a `RemoteCartStore` or a `CartStore`) from now on.
    public init(_ store: some CartSource, carts: CartSelection = .all) {
        selection = carts
        connection = store.connectionState
        store.observers.add(self, carts: carts)
    }

    /// One of its carts, by id.
    public subscript(id: String) -> Cart? {
        carts.first { $0.id == id }
    }

    /// Its cart, when it follows one (`.only(["alice"])`).
    public var cart: Cart? { carts.count == 1 ? carts[0] : nil }

    public func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        self.carts = carts
        isLoaded = true
    }

    public func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart]) {
        self.carts = carts
        isLoaded = true
        isFromCache = true
    }

    public func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
        // With pending writes, what to show comes next (`didChangePending`).
        guard pending[cart.id] == nil else { return }
        show(cart)
    }

    public func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        self.pending[cart.id] = pending.isEmpty ? nil : pending
        show(cart)
    }

    public func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
        lastRejection = (write, error)
    }

    private func show(_ cart: Cart) {
        if let index = carts.firstIndex(where: { $0.id == cart.id }) {
            carts[index] = cart
        } else {
            carts.append(cart)
            carts.sort { $0.id < $1.id }
        }
    }

    public func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        self.carts = carts
        lastResync = reason
    }

    public func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {
        connection = state
        if state == .live { isFromCache = false }
    }

    public func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {
        for id in carts { refused[id] = error }
    }

    public func cartSource(
        _ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange
    ) {
        if case .unavailable(let error) = change {
            presence[cartID] = nil
            presenceUnavailable[cartID] = error
        } else {
            presence[cartID] = members
            presenceUnavailable[cartID] = nil
        }
    }
}

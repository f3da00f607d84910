import Foundation

/// A write made through a `RemoteCartStore` that the server has not confirmed yet: shown at
/// once on top of the confirmed cart, sent (with `id` as its `Idempotency-Key`, so that it is
/// applied once however often it is sent), and gone from the pending ones when the event it
/// made is applied, or when the server refuses it (`CartObserver`'s `didReject`).
public struct PendingWrite: Sendable, Hashable, Identifiable, Codable {
    /// Its idempotency key: unique, and the key of the event that confirms it.
    public let id: String
    /// The cart it changes.
    public let cartID: String
    /// What it does.
    public let write: CartWrite
    /// The version the cart must be at for the server to take it (`If-Match`); nil: any.
    public let expectedVersion: Int64?
    /// When the app made it.
    public let madeAt: Date

    public init(id: String, cartID: String, write: CartWrite, expectedVersion: Int64?, madeAt: Date) {
        self.id = id
        self.cartID = cartID
        self.write = write
        self.expectedVersion = expectedVersion
        self.madeAt = madeAt
    }
}

extension Cart {
    /// This cart with `writes` applied in order, as a store would commit them where their
    /// rules allow (a write its rules refuse here, such as a removal of a line the cart does
    /// not have, leaves it as it is: the server decides). Its version stays the confirmed one.
    public func applying(_ writes: some Sequence<PendingWrite>) -> Cart {
        var cart = self
        for pending in writes where pending.cartID == id {
            guard let change = try? pending.write.change(to: cart) else { continue }
            let version = cart.version
            cart.apply(CartEvent(seq: 0, cartID: id, change: change, version: version, committedAt: pending.madeAt))
        }
        return cart
    }
}

import Foundation

/// What became of a write made through a store (`CartWriter`).
public enum WriteOutcome: Sendable {
    /// Committed: `seq` is its event's. A `CartStore`'s writes are committed before `write`
    /// returns; a `RemoteCartStore`'s once the server has taken them.
    case confirmed(seq: Int64)
    /// The server refused it for good; it was rolled back (a `RemoteCartStore`'s: a local
    /// store's refusals are thrown by `write`).
    case rejected(RemoteStoreError)
    /// The store does not remember it: not one of its writes, or one older than its last
    /// 1 000 (`RemoteCartStore.rememberedOutcomes`).
    case unknown
}

/// A store an app writes to the same way whatever it is: a `CartStore` in process (previews,
/// tests, a device-only app), a `RemoteCartStore` (an app of a server's carts), or a test
/// double. A view model written against `any CartWriter` reads through `CartSource` and writes
/// through these, with the same labels and one outcome type.
///
/// ```swift
/// func add(_ product: Product) async {
///     do {
///         let write = try await store.addItem(product.sku, quantity: 1, unitPriceCents: product.cents, to: cartID)
///         if case .rejected(let error) = await store.outcome(of: write) { problem = error.description }
///     } catch {
///         problem = "\(error)"  // a value the rules refuse, or (in process) a refused change
///     }
/// }
/// ```
public protocol CartWriter: CartSource {
    /// Makes `write` on the cart; its observers are told at once. Returns the write, to ask
    /// `outcome(of:)` about.
    ///
    /// - A `CartStore` commits it before returning (its outcome is `confirmed`), and throws
    ///   what it refuses (`CartStoreError`: an item not found, a version conflict, …).
    /// - A `RemoteCartStore` shows it to its observers on top of the server's carts and sends
    ///   it (offline: when it can), never waiting for the server; what the server refuses is
    ///   rolled back and is the outcome `rejected`. It throws only for values the rules refuse
    ///   and for too many pending writes (`RemoteStoreError`).
    ///
    /// - Parameter expectedVersion: the version the cart must be at (0: must not exist yet).
    @discardableResult
    func write(_ write: CartWrite, to cartID: String, expectedVersion: Int64?) async throws -> PendingWrite

    /// Waits for what becomes of `write`; `unknown` for a write this store does not remember.
    func outcome(of write: PendingWrite) async -> WriteOutcome
}

// The four writes, on every store: each is `write` with its `CartWrite`.
extension CartWriter {
    /// Adds `quantity` of `sku` to the cart (a new line, or more of an existing one, which takes
    /// this price and name), as `write(_:to:expectedVersion:)` makes it.
    ///
    /// - Parameters:
    ///   - sku: the line's SKU.
    ///   - quantity: how many to add.
    ///   - unitPriceCents: the line's price in cents.
    ///   - name: the line's display name.
    ///   - cartID: the cart.
    ///   - expectedVersion: the version the cart must be at (0: must not exist yet).
    @discardableResult
    public func addItem(
        _ sku: String, quantity: Int, unitPriceCents: Int, name: String? = nil, to cartID: String, expectedVersion: Int64? = nil
    ) async throws -> PendingWrite {
        try await write(
            .addItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name), to: cartID, expectedVersion: expectedVersion
        )
    }

    /// Sets the quantity of a line (0 removes it), as `write(_:to:expectedVersion:)` makes it.
    @discardableResult
    public func setQuantity(of sku: String, to quantity: Int, in cartID: String, expectedVersion: Int64? = nil) async throws -> PendingWrite
    {
        try await write(.setQuantity(sku: sku, quantity: quantity), to: cartID, expectedVersion: expectedVersion)
    }

    /// Removes a line, as `write(_:to:expectedVersion:)` makes it.
    @discardableResult
    public func removeItem(_ sku: String, from cartID: String, expectedVersion: Int64? = nil) async throws -> PendingWrite {
        try await write(.removeItem(sku: sku), to: cartID, expectedVersion: expectedVersion)
    }

    /// Removes every line of the cart (the cart and its version remain), as
    /// `write(_:to:expectedVersion:)` makes it.
    @discardableResult
    public func clear(_ cartID: String, expectedVersion: Int64? = nil) async throws -> PendingWrite {
        try await write(.clear, to: cartID, expectedVersion: expectedVersion)
    }
}

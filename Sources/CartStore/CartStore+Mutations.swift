import Foundation

/// The result of a committed mutation.
public struct CartCommit: Sendable, Hashable {
    /// The cart as committed.
    public var cart: Cart
    /// The event the commit appended to the log (and delivered to observers).
    public var event: CartEvent
    /// Whether this is the answer of an earlier commit, given again for a mutation that repeated
    /// its `IdempotencyKey`: nothing was written, and no event delivered, this time.
    public var isReplay = false

    package init(cart: Cart, event: CartEvent, isReplay: Bool = false) {
        self.cart = cart
        self.event = event
        self.isReplay = isReplay
    }
}

extension CartStore {
    /// Adds `quantity` of `sku` to the cart, creating the cart or the line as needed.
    ///
    /// An existing line keeps its place and takes the new total quantity, and the price and
    /// name given here.
    ///
    /// - Parameters:
    ///   - cartID: the cart (`CartLimits`' id rule).
    ///   - sku: the line's SKU (the same rule).
    ///   - quantity: how many to add, 1…10 000 (the line's total stays within that range too).
    ///   - unitPriceCents: the line's price in cents, 0…10⁹.
    ///   - name: the line's display name, at most 200 characters.
    ///   - expectedVersion: when given, the cart must be at this version (0 for a cart that
    ///     does not exist yet), or the call fails with `versionConflict` and changes nothing.
    ///   - idempotencyKey: when given, the change is made once for this key: a later call with
    ///     the same key and arguments returns this commit again (`isReplay`), one with other
    ///     arguments throws `idempotencyKeyReused` (see `IdempotencyKey`). The same holds for
    ///     every mutation.
    @discardableResult
    public func addItem(
        cartID: String, sku: String, quantity: Int, unitPriceCents: Int, name: String? = nil,
        expectedVersion: Int64? = nil, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CartCommit {
        try await commit(
            .addItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name), to: cartID,
            expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Sets the quantity of an existing line; 0 removes the line.
    @discardableResult
    public func setQuantity(
        cartID: String, sku: String, quantity: Int, expectedVersion: Int64? = nil, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CartCommit {
        try await commit(
            .setQuantity(sku: sku, quantity: quantity), to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Removes a line from the cart.
    @discardableResult
    public func removeItem(
        cartID: String, sku: String, expectedVersion: Int64? = nil, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CartCommit {
        try await commit(.removeItem(sku: sku), to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Removes every line of the cart. The cart itself, and its version, remain.
    @discardableResult
    public func clearCart(
        cartID: String, expectedVersion: Int64? = nil, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CartCommit {
        try await commit(.clear, to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Commits `write` to the cart: its values checked, then its change decided on the cart as
    /// committed (`CartWrite.change(to:)`, the rules a `RemoteCartStore` predicts its pending
    /// writes with).
    ///
    /// - Parameters:
    ///   - write: the write, checked against `CartLimits` before anything is read.
    ///   - cartID: the cart.
    ///   - expectedVersion: when given, the cart must be at this version (0 for a cart that does
    ///     not exist yet), or the call fails with `versionConflict` and changes nothing.
    ///   - idempotencyKey: with a key, the write is made once: a repeat of the same request
    ///     answers the first commit again (`CartCommit.isReplay`), another request with the key
    ///     is refused (`idempotencyKeyReused`).
    @discardableResult
    public func commit(
        _ write: CartWrite, to cartID: String, expectedVersion: Int64? = nil, idempotencyKey: IdempotencyKey? = nil
    ) async throws -> CartCommit {
        try write.check()
        return try await commit(
            cartID: cartID, expectedVersion: expectedVersion, mustExist: write.needsExistingCart, keyed: idempotencyKey, request: write
        ) { cart in
            try write.change(to: cart)
        }
    }

    /// The one write path: the id checked, then the engine commits the mutation (see
    /// `CartStoreBackend`), which delivers the event to the observers before it returns.
    private func commit(
        cartID: String, expectedVersion: Int64?, mustExist: Bool, keyed key: IdempotencyKey?, request: CartWrite,
        decide: @escaping @Sendable (Cart) throws -> CartChange
    ) async throws -> CartCommit {
        try CartLimits.checkCartID(cartID)
        let keyed = key.map {
            KeyedRequest(key: $0, fingerprint: request.fingerprint(cartID: cartID, expectedVersion: expectedVersion))
        }
        let mutation = CartMutation(
            cartID: cartID, expectedVersion: expectedVersion, mustExist: mustExist, decide: decide,
            validate: { [weak self] proposal in try self?.validate(proposal) }, keyed: keyed)
        return try await backend.commit(mutation)
    }

    /// Asks the validators about a change, inside the engine's transaction; a throw refuses it.
    func validate(_ proposal: CartChangeProposal) throws {
        try observers.validate(proposal, store: self)
    }

    /// Delivers a committed event to the observers. Engines call it once per event, in seq
    /// order, without touching the database meanwhile.
    func deliver(_ event: CartEvent) {
        observers.deliver(event, from: self)
    }
}

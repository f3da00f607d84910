import Foundation
import GRDB

/// The result of a committed mutation.
public struct CartCommit: Sendable, Hashable {
    /// The cart as committed.
    public var cart: Cart
    /// The event the commit appended to the log (and delivered to observers).
    public var event: CartEvent
}

extension CartStore {
    /// Adds `quantity` of `sku` to the cart, creating the cart or the line as needed.
    ///
    /// An existing line keeps its place and takes the new total quantity, and the price and
    /// name given here.
    ///
    /// - Parameter expectedVersion: when given, the cart must be at this version (0 for a cart
    ///   that does not exist yet), or the call fails with `versionConflict` and changes nothing.
    @discardableResult
    public func addItem(
        cartID: String, sku: String, quantity: Int, unitPriceCents: Int, name: String? = nil,
        expectedVersion: Int64? = nil
    ) async throws -> CartCommit {
        try CartLimits.checkSKU(sku)
        try CartLimits.checkQuantity(quantity)
        try CartLimits.checkPrice(unitPriceCents)
        try CartLimits.checkName(name)
        return try await commit(cartID: cartID, expectedVersion: expectedVersion, mustExist: false) { cart in
            if let line = cart.items.first(where: { $0.sku == sku }) {
                let total = line.quantity + quantity
                guard total <= CartLimits.quantityRange.upperBound else {
                    throw CartStoreError(
                        .quantityOverflow,
                        "cart \(cartID) has \(line.quantity) of \(sku); adding \(quantity) would exceed \(CartLimits.quantityRange.upperBound)")
                }
                let item = CartItem(sku: sku, quantity: total, unitPriceCents: unitPriceCents, name: name)
                return .itemAdded(item: item, addedQuantity: quantity)
            }
            guard cart.items.count < CartLimits.maxItemsPerCart else {
                throw CartStoreError(.tooManyItems, "cart \(cartID) already has \(CartLimits.maxItemsPerCart) lines")
            }
            let item = CartItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name)
            return .itemAdded(item: item, addedQuantity: quantity)
        }
    }

    /// Sets the quantity of an existing line; 0 removes the line.
    @discardableResult
    public func setQuantity(
        cartID: String, sku: String, quantity: Int, expectedVersion: Int64? = nil
    ) async throws -> CartCommit {
        try CartLimits.checkSKU(sku)
        try CartLimits.checkQuantity(quantity, allowZero: true)
        return try await commit(cartID: cartID, expectedVersion: expectedVersion, mustExist: true) { cart in
            try Self.requireLine(sku, in: cart)
            return quantity == 0 ? .itemRemoved(sku: sku) : .quantityChanged(sku: sku, quantity: quantity)
        }
    }

    /// Removes a line from the cart.
    @discardableResult
    public func removeItem(cartID: String, sku: String, expectedVersion: Int64? = nil) async throws -> CartCommit {
        try CartLimits.checkSKU(sku)
        return try await commit(cartID: cartID, expectedVersion: expectedVersion, mustExist: true) { cart in
            try Self.requireLine(sku, in: cart)
            return .itemRemoved(sku: sku)
        }
    }

    /// Removes every line of the cart. The cart itself, and its version, remain.
    @discardableResult
    public func clearCart(cartID: String, expectedVersion: Int64? = nil) async throws -> CartCommit {
        try await commit(cartID: cartID, expectedVersion: expectedVersion, mustExist: true) { _ in .cartCleared }
    }

    private static func requireLine(_ sku: String, in cart: Cart) throws {
        guard cart.items.contains(where: { $0.sku == sku }) else {
            throw CartStoreError(.itemNotFound, "cart \(cart.id) has no item \(sku)")
        }
    }

    /// The one write path: checks, validates, changes the rows and appends the event, inside a
    /// savepoint of a group-commit transaction; after the commit, and still serialised with
    /// other writes, delivery.
    private func commit(
        cartID: String, expectedVersion: Int64?, mustExist: Bool,
        decide: @escaping @Sendable (Cart) throws -> CartChange
    ) async throws -> CartCommit {
        try CartLimits.checkCartID(cartID)
        return try await withCheckedThrowingContinuation { caller in
            let mutation = GroupCommit.Mutation(body: { db in
                try self.apply(cartID: cartID, expectedVersion: expectedVersion, mustExist: mustExist, decide: decide, db)
            }, caller: caller)
            do {
                if try commits.enqueue(mutation) {
                    writer.asyncWriteWithoutTransaction { db in self.drainCommits(db) }
                }
            } catch {
                caller.resume(throwing: error)
            }
        }
    }

    /// On the writer: commits waiting mutations a batch at a time until none is left. After 16
    /// batches it queues itself again behind the writer's other work (reads of the writer
    /// connection, pruning), so that a steady stream of mutations cannot starve them.
    private func drainCommits(_ db: Database) {
        for _ in 0..<16 {
            guard let batch = commits.nextBatch() else { return }
            let outcomes: [Result<CartCommit, any Error>]
            do {
                outcomes = try commits.commit(batch.map(\.body), db)
            } catch {
                let error = CartStoreError.storage(error)
                for mutation in batch { mutation.caller.resume(throwing: error) }
                continue
            }
            for case .success(let commit) in outcomes { deliver(commit.event) }
            for (mutation, outcome) in zip(batch, outcomes) {
                mutation.caller.resume(with: outcome.mapError(CartStoreError.storage))
            }
        }
        // Still draining (the flag stays set): carry on after whatever else waits.
        writer.asyncWriteWithoutTransaction { db in self.drainCommits(db) }
    }

    /// One mutation, inside the batch's transaction.
    private func apply(
        cartID: String, expectedVersion: Int64?, mustExist: Bool,
        decide: (Cart) throws -> CartChange, _ db: Database
    ) throws -> CartCommit {
        let before = try Self.loadCart(cartID, db) ?? Cart(id: cartID)
        if mustExist && before.version == 0 {
            throw CartStoreError(.cartNotFound, "no cart \(cartID)")
        }
        if let expectedVersion, expectedVersion != before.version {
            throw CartStoreError(
                .versionConflict,
                "cart \(cartID) is at version \(before.version), not \(expectedVersion)")
        }
        let change = try decide(before)
        let encodedChange = EventJSON.change(change)
        let committedAt = Date().millisecondsSince1970
        // Validators see the outcome before anything is written; a throw rolls back.
        let pending = CartEvent(
            seq: 0, cartID: cartID, change: change, encodedChange: encodedChange, version: before.version + 1,
            committedAt: Date(millisecondsSince1970: committedAt))
        var after = before
        after.apply(pending)
        let proposal = CartChangeProposal(cartID: cartID, change: change, before: before, after: after)
        try observers.forEachNow { try $0.cartStore(self, validate: proposal) }

        // Every statement of a mutation is prepared once per connection and reused: parsing
        // and planning SQL was a sixth of a mutation's CPU.
        try db.cachedStatement(sql: """
            INSERT INTO cart_events (cart_id, kind, change, cart_version, committed_at) VALUES (?, ?, ?, ?, ?)
            """).execute(arguments: [cartID, change.kind.rawValue, encodedChange, after.version, committedAt])
        var event = pending
        event.seq = db.lastInsertedRowID
        try db.cachedStatement(sql: """
            INSERT INTO carts (id, version) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version
            """).execute(arguments: [cartID, after.version])
        try Self.write(change, of: cartID, position: event.seq, db)
        return CartCommit(cart: after, event: event)
    }

    private static func write(_ change: CartChange, of cartID: String, position: Int64, _ db: Database) throws {
        switch change {
        case .itemAdded(let item, _):
            // Upsert that keeps an existing line's position.
            try db.cachedStatement(sql: """
                INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (cart_id, sku) DO UPDATE SET
                    quantity = excluded.quantity,
                    unit_price_cents = excluded.unit_price_cents,
                    name = excluded.name
                """).execute(arguments: [cartID, item.sku, item.quantity, item.unitPriceCents, item.name, position])
        case .quantityChanged(let sku, let quantity):
            try db.cachedStatement(sql: "UPDATE cart_items SET quantity = ? WHERE cart_id = ? AND sku = ?")
                .execute(arguments: [quantity, cartID, sku])
        case .itemRemoved(let sku):
            try db.cachedStatement(sql: "DELETE FROM cart_items WHERE cart_id = ? AND sku = ?")
                .execute(arguments: [cartID, sku])
        case .cartCleared:
            try db.cachedStatement(sql: "DELETE FROM cart_items WHERE cart_id = ?").execute(arguments: [cartID])
        }
    }

    /// Delivers a committed event to the observers, in commit order (the caller holds the
    /// writer), without touching the database.
    private func deliver(_ event: CartEvent) {
        observers.notify { [self] observer in
            observer.cartStore(self, didCommit: event)
        }
    }
}

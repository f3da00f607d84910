import GRDB

extension SQLiteBackend {
    func cart(_ cartID: String) async throws -> Cart? {
        try await writer.read { db in try Self.loadCart(cartID, db) }
    }

    /// Read in one transaction.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot {
        try await writer.read { db in
            var carts = CartRow.order(CartRow.Columns.id)
            var lines = CartItemRow.order(CartItemRow.Columns.cartID, CartItemRow.Columns.position)
            if let cartIDs {
                carts = carts.filter(cartIDs.contains(CartRow.Columns.id))
                lines = lines.filter(cartIDs.contains(CartItemRow.Columns.cartID))
            }
            var itemsByCart: [String: [CartItem]] = [:]
            for line in try lines.fetchAll(db) {
                itemsByCart[line.cartID, default: []].append(line.item)
            }
            let result = try carts.fetchAll(db).map { row in
                Cart(id: row.id, version: row.version, items: itemsByCart[row.id] ?? [])
            }
            return CartSnapshot(carts: result, seq: try Self.latestSeq(db))
        }
    }

    /// Runs on every mutation, so it uses cached statements rather than building SQL each time.
    static func loadCart(_ cartID: String, _ db: Database) throws -> Cart? {
        let versionStatement = try db.cachedStatement(sql: "SELECT version FROM carts WHERE id = ?")
        guard let version = try Int64.fetchOne(versionStatement, arguments: [cartID]) else { return nil }
        let linesStatement = try db.cachedStatement(
            sql: """
                SELECT sku, quantity, unit_price_cents, name FROM cart_items WHERE cart_id = ? ORDER BY position
                """)
        let items = try Row.fetchAll(linesStatement, arguments: [cartID]).map { row in
            CartItem(sku: row[0], quantity: row[1], unitPriceCents: row[2], name: row[3])
        }
        return Cart(id: cartID, version: version, items: items)
    }
}

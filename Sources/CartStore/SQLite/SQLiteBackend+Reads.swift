import Foundation
import GRDB

extension SQLiteBackend {
    func cart(_ cartID: String) async throws -> Cart? {
        try await read(small: true) { db in try Self.loadCart(cartID, db) }
    }

    /// Read in one transaction. The whole store is a small read when it holds at most
    /// `smallReadCarts` carts, which the read itself tells first (a step over at most that many
    /// rows of an index); a larger one is left for GRDB's reader queue.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot {
        if let cartIDs {
            return try await read(small: cartIDs.count <= Self.smallReadCarts) { db in try Self.snapshot(of: cartIDs, db) }
        }
        let small = try smallReaders?.read { db in
            try Self.hasMoreCarts(than: Self.smallReadCarts, db) ? nil : Self.snapshot(of: nil, db)
        }
        if case .some(.some(let snapshot)) = small { return snapshot }
        return try await writer.read { db in try Self.snapshot(of: nil, db) }
    }

    static func hasMoreCarts(than count: Int, _ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM carts LIMIT 1 OFFSET ?)"), arguments: [count]) ?? false
    }

    /// The most carts, or events in a page, a read may name to be run on the caller's thread.
    static let smallReadCarts = 16
    static let smallReadEvents = 64

    /// Runs a read in one transaction. A small read (a few carts, a short page of events: tens
    /// of microseconds of SQLite) of a database file runs on the caller's thread, on one of
    /// `smallReaders`' connections: handing it to GRDB's reader queue and resuming afterwards
    /// cost more than the read (two thread wake-ups). In WAL mode readers never wait for the
    /// writer, so such a read does not hold the caller (an event loop, in the server) behind a
    /// commit. Anything larger, a small read while every one of those connections is busy, and
    /// every read of a database queue (one connection, where a read waits for the write under
    /// way: in-memory stores) is GRDB's async read, on its own queue.
    func read<T: Sendable>(small: Bool, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        if small, let smallReaders, let value = try smallReaders.read(body) { return value }
        return try await writer.read(body)
    }

    /// The carts (all, or those named) with the seq they stand at. Every read here is a cached
    /// statement decoded by column position: building the SQL through the query interface and
    /// preparing it cost more than the query itself (a point read of one cart is microseconds).
    /// A set of carts is one JSON array argument (`json_each`), so it is one statement whatever
    /// its size.
    static func snapshot(of cartIDs: Set<String>?, _ db: Database) throws -> CartSnapshot {
        let seq = try latestSeq(db)
        if let cartIDs, cartIDs.count == 1, let cartID = cartIDs.first {
            return CartSnapshot(carts: try loadCart(cartID, db).map { [$0] } ?? [], seq: seq)
        }
        let linesStatement: Statement
        let cartsStatement: Statement
        let arguments: StatementArguments
        if let cartIDs {
            linesStatement = try db.cachedStatement(
                sql: """
                    SELECT cart_id, sku, quantity, unit_price_cents, name FROM cart_items
                    WHERE cart_id IN (SELECT value FROM json_each(?)) ORDER BY cart_id, position
                    """)
            cartsStatement = try db.cachedStatement(
                sql: "SELECT id, version FROM carts WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id")
            arguments = [jsonArray(cartIDs)]
        } else {
            linesStatement = try db.cachedStatement(
                sql: "SELECT cart_id, sku, quantity, unit_price_cents, name FROM cart_items ORDER BY cart_id, position")
            cartsStatement = try db.cachedStatement(sql: "SELECT id, version FROM carts ORDER BY id")
            arguments = []
        }
        var itemsByCart: [String: [CartItem]] = [:]
        let lines = try Row.fetchCursor(linesStatement, arguments: arguments)
        while let row = try lines.next() {
            itemsByCart[row[0], default: []].append(CartItem(sku: row[1], quantity: row[2], unitPriceCents: row[3], name: row[4]))
        }
        var carts: [Cart] = []
        let rows = try Row.fetchCursor(cartsStatement, arguments: arguments)
        while let row = try rows.next() {
            let id: String = row[0]
            carts.append(Cart(id: id, version: row[1], items: itemsByCart[id] ?? []))
        }
        return CartSnapshot(carts: carts, seq: seq)
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

    /// A set of strings as one JSON array, the argument of `json_each`.
    static func jsonArray(_ strings: Set<String>) -> String {
        var json = JSONBytes(capacity: 2 + strings.count * 16)
        json.array(Array(strings)) { $0.string($1) }
        return String(decoding: json.bytes, as: UTF8.self)
    }
}

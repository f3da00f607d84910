import CartStore
import Foundation
import Logging
import PostgresNIO

/// Reads on PostgreSQL: carts, snapshots and the log, each on a pooled connection by a deadline.
extension PostgresBackend {
    func cart(_ cartID: String) async throws -> Cart? {
        try await run { try await self.withConnection { try await Self.loadCart(cartID, $0, self.logger) } }
    }

    /// Read in one repeatable-read transaction: the carts and the seq they reflect agree.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot {
        let ids = cartIDs.map { Array($0) }
        let logger = self.logger
        return try await readOnlySnapshot { connection in
            let seq =
                try await connection.query("SELECT latest FROM event_seq", logger: logger).collect().first?.decode(Int64.self) ?? 0
            var itemsByCart: [String: [CartItem]] = [:]
            let lines = try await connection.query(
                """
                SELECT cart_id, sku, quantity, unit_price_cents, name FROM cart_items
                WHERE \(ids == nil) OR cart_id = ANY(\(ids ?? [])) ORDER BY cart_id, position
                """, logger: logger)
            for try await (cartID, sku, quantity, price, name) in lines.decode((String, String, Int64, Int64, String?).self) {
                itemsByCart[cartID, default: []].append(
                    CartItem(sku: sku, quantity: Int(quantity), unitPriceCents: Int(price), name: name))
            }
            var carts: [Cart] = []
            let rows = try await connection.query(
                "SELECT id, version FROM carts WHERE \(ids == nil) OR id = ANY(\(ids ?? [])) ORDER BY id", logger: logger)
            for try await (id, version) in rows.decode((String, Int64).self) {
                carts.append(Cart(id: id, version: version, items: itemsByCart[id] ?? []))
            }
            return CartSnapshot(carts: carts, seq: seq)
        }
    }

    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead {
        let ids = carts.map { Array($0) }
        let logger = self.logger
        return try await readOnlySnapshot { connection in
            let (latest, oldest) =
                try await connection.query(
                    "SELECT latest, (SELECT min(seq) FROM cart_events) FROM event_seq", logger: logger
                ).collect().first?.decode((Int64, Int64?).self) ?? (Int64(0), nil)
            if let refusal = try EventLogRead.refusal(since: seq, latest: latest, oldestRetained: oldest ?? latest + 1) {
                return refusal
            }
            var events: [CartEvent] = []
            let rows = try await connection.query(
                """
                SELECT \(unescaped: CartEvent.storedColumns) FROM cart_events
                WHERE seq > \(seq) AND (\(ids == nil) OR cart_id = ANY(\(ids ?? [])))
                ORDER BY seq LIMIT \(Int64(limit))
                """, logger: logger)
            for try await row in rows.decode(CartEvent.StoredRow.self) { events.append(try .stored(row)) }
            return .events(events, latestSeq: latest)
        }
    }

    /// Runs `body` in one repeatable-read, read-only transaction on a pooled connection, by the
    /// deadline, with PostgreSQL's failures as the store's errors: what it reads is one point of
    /// the log.
    private func readOnlySnapshot<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let logger = self.logger
        return try await run {
            try await self.withConnection { connection in
                try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
                    return try await body(connection)
                }
            }
        }
    }

    func latestSeq() async throws -> Int64 {
        try await run {
            try await self.query("SELECT latest FROM event_seq", logger: self.logger).first?.decode(Int64.self) ?? 0
        }
    }

    func oldestRetainedSeq() async throws -> Int64 {
        try await run {
            try await self.query(
                "SELECT coalesce((SELECT min(seq) FROM cart_events), latest + 1) FROM event_seq", logger: self.logger
            ).first?.decode(Int64.self) ?? 1
        }
    }

    func pruneEvents(keepingLast count: Int) async throws -> Int {
        try await run {
            try await self.query(
                """
                WITH pruned AS (DELETE FROM cart_events WHERE seq <= (SELECT latest FROM event_seq) - \(Int64(count)) RETURNING 1)
                SELECT count(*) FROM pruned
                """, logger: self.logger
            ).first.map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }

    func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await run {
            try await self.query(
                """
                WITH pruned AS (DELETE FROM cart_events WHERE committed_at < \(date.millisecondsSince1970) RETURNING 1)
                SELECT count(*) FROM pruned
                """, logger: self.logger
            ).first.map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }

    func idempotencyKeyCount() async throws -> Int {
        try await run {
            Int(try await self.query("SELECT count(*) FROM idempotency_keys", logger: self.logger).first?.decode(Int64.self) ?? 0)
        }
    }

    func pruneIdempotencyKeys(createdBefore date: Date, keepingNewest count: Int) async throws -> Int {
        try await run {
            try await self.query(
                """
                WITH old AS (DELETE FROM idempotency_keys WHERE created_at < \(date.millisecondsSince1970) RETURNING 1),
                beyond AS (
                    DELETE FROM idempotency_keys
                    WHERE created_at >= \(date.millisecondsSince1970)
                        AND seq <= (SELECT seq FROM idempotency_keys ORDER BY seq DESC LIMIT 1 OFFSET \(Int64(count)))
                    RETURNING 1)
                SELECT (SELECT count(*) FROM old) + (SELECT count(*) FROM beyond)
                """, logger: self.logger
            ).first.map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }
}

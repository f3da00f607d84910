import Foundation
import GRDB

extension SQLiteBackend {
    /// The log's tail from memory when the writer still holds it (`RecentEvents`), else a read.
    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead {
        if let page = recent.page(after: seq, limit: limit, carts: carts) { return page }
        return try await read(small: limit <= Self.smallReadEvents) { db in try Self.readEvents(after: seq, limit: limit, carts: carts, db)
        }
    }

    func latestSeq() async throws -> Int64 {
        if let newest = recent.newestSeq { return newest }
        return try await writer.read { db in try Self.latestSeq(db) }
    }

    func oldestRetainedSeq() async throws -> Int64 {
        try await writer.read { db in try Self.oldestRetainedSeq(db) }
    }

    // A prune forgets the recent events (on the writer, so no commit comes between): the log
    // may no longer hold some of them.
    func pruneEvents(keepingLast count: Int) async throws -> Int {
        try await writer.write { db in
            recent.forgetAll()
            let cutoff = try Self.latestSeq(db) - Int64(count)
            return try CartEventRow.filter(CartEventRow.Columns.seq <= cutoff).deleteAll(db)
        }
    }

    func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await writer.write { db in
            recent.forgetAll()
            return try CartEventRow.filter(CartEventRow.Columns.committedAt < date.millisecondsSince1970).deleteAll(db)
        }
    }

    func idempotencyKeyCount() async throws -> Int {
        // A reader: the writer goes on meanwhile.
        try await writer.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM idempotency_keys") ?? 0 }
    }

    func pruneIdempotencyKeys(createdBefore date: Date, keepingNewest count: Int) async throws -> Int {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM idempotency_keys WHERE created_at < ?", arguments: [date.millisecondsSince1970])
            var forgotten = db.changesCount
            // The newest `count` by seq: the seq of the first one older than them, found through the index.
            try db.execute(
                sql: """
                    DELETE FROM idempotency_keys
                    WHERE seq <= (SELECT seq FROM idempotency_keys ORDER BY seq DESC LIMIT 1 OFFSET ?)
                    """, arguments: [count])
            forgotten += db.changesCount
            return forgotten
        }
    }

    static func readEvents(after seq: Int64, limit: Int, carts: Set<String>?, _ db: Database) throws -> EventLogRead {
        let (latest, oldestRetained) = try logBounds(db)
        if let refusal = try EventLogRead.refusal(since: seq, latest: latest, oldestRetained: oldestRetained) {
            return refusal
        }
        // Cached statements, decoded by position (see `snapshot(of:_:)`).
        let statement: Statement
        let arguments: StatementArguments
        if let carts {
            statement = try db.cachedStatement(
                sql: """
                    SELECT \(CartEvent.storedColumns) FROM cart_events
                    WHERE seq > ? AND cart_id IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT ?
                    """)
            arguments = [seq, jsonArray(carts), limit]
        } else {
            statement = try db.cachedStatement(
                sql:
                    "SELECT \(CartEvent.storedColumns) FROM cart_events WHERE seq > ? ORDER BY seq LIMIT ?"
            )
            arguments = [seq, limit]
        }
        var events: [CartEvent] = []
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        while let row = try rows.next() {
            events.append(
                try .stored((row[0], row[1], row[2], row[3], row[4], row[5])))
        }
        return .events(events, latestSeq: latest)
    }

    static func latestSeq(_ db: Database) throws -> Int64 {
        // AUTOINCREMENT keeps the newest seq ever handed out here, even after pruning.
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'cart_events'")) ?? 0
    }

    /// The newest seq (0 when nothing was ever committed) and the oldest still in the log
    /// (`latest + 1` when it is empty), in one statement: a page of the log is read in two
    /// statements rather than three.
    static func logBounds(_ db: Database) throws -> (latest: Int64, oldestRetained: Int64) {
        let statement = try db.cachedStatement(
            sql: """
                SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'cart_events'), (SELECT MIN(seq) FROM cart_events)
                """)
        let row = try Row.fetchOne(statement)
        let latest: Int64 = row?[0] ?? 0
        return (latest, row?[1] ?? latest + 1)
    }

    static func oldestRetainedSeq(_ db: Database) throws -> Int64 {
        try logBounds(db).oldestRetained
    }
}

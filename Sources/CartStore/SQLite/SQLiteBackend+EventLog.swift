import Foundation
import GRDB

extension SQLiteBackend {
    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead {
        try await writer.read { db in try Self.readEvents(after: seq, limit: limit, carts: carts, db) }
    }

    func latestSeq() async throws -> Int64 {
        try await writer.read { db in try Self.latestSeq(db) }
    }

    func oldestRetainedSeq() async throws -> Int64 {
        try await writer.read { db in try Self.oldestRetainedSeq(db) }
    }

    func pruneEvents(keepingLast count: Int) async throws -> Int {
        try await writer.write { db in
            let cutoff = try Self.latestSeq(db) - Int64(count)
            return try CartEventRow.filter(CartEventRow.Columns.seq <= cutoff).deleteAll(db)
        }
    }

    func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await writer.write { db in
            try CartEventRow.filter(CartEventRow.Columns.committedAt < date.millisecondsSince1970).deleteAll(db)
        }
    }

    static func readEvents(after seq: Int64, limit: Int, carts: Set<String>?, _ db: Database) throws -> EventLogRead {
        let latest = try latestSeq(db)
        if let refusal = try EventLogRead.refusal(since: seq, latest: latest, oldestRetained: try oldestRetainedSeq(db)) {
            return refusal
        }
        var request = CartEventRow.filter(CartEventRow.Columns.seq > seq)
        if let carts {
            request = request.filter(carts.contains(CartEventRow.Columns.cartID))
        }
        let events = try request.order(CartEventRow.Columns.seq).limit(limit).fetchAll(db).map { try $0.event() }
        return .events(events, latestSeq: latest)
    }

    static func latestSeq(_ db: Database) throws -> Int64 {
        // AUTOINCREMENT keeps the newest seq ever handed out here, even after pruning.
        try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'cart_events'") ?? 0
    }

    static func oldestRetainedSeq(_ db: Database) throws -> Int64 {
        if let oldest = try Int64.fetchOne(db, sql: "SELECT MIN(seq) FROM cart_events") {
            return oldest
        }
        return try latestSeq(db) + 1
    }
}

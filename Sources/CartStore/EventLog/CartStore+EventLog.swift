import Foundation
import GRDB

/// The answer of the event log to "what happened after seq N?".
public enum EventLogRead: Sendable, Hashable {
    /// The events after the asked seq, in seq order, at most the asked limit. When fewer than
    /// the limit came back, `latestSeq` was the newest event at the time of the read.
    case events([CartEvent], latestSeq: Int64)
    /// Events after the asked seq were pruned: there is no gap-free answer. Take a snapshot
    /// and follow the log from the snapshot's seq instead.
    case tooOld(oldestRetainedSeq: Int64, latestSeq: Int64)
}

extension CartStore {
    /// The largest page `events(after:limit:carts:)` returns.
    public static let maxEventPage = 10_000

    /// The events after `seq` (0: from the start), optionally only those of some carts.
    ///
    /// - Throws: `invalidSince` for a negative seq, `sinceAhead` for a seq newer than the log
    ///   (the caller followed another database), `invalidLimit` outside 1…`maxEventPage`.
    public func events(after seq: Int64, limit: Int = 1_000, carts: Set<String>? = nil) async throws -> EventLogRead {
        try Self.checkEventQuery(after: seq, limit: limit, carts: carts)
        return try await writer.read { db in try Self.readEvents(after: seq, limit: limit, carts: carts, db) }
    }

    /// The seq of the newest committed event; 0 when nothing was ever committed.
    public func latestSeq() async throws -> Int64 {
        try await writer.read { db in try Self.latestSeq(db) }
    }

    /// The oldest seq still in the log; `latestSeq() + 1` when the log is empty.
    public func oldestRetainedSeq() async throws -> Int64 {
        try await writer.read { db in try Self.oldestRetainedSeq(db) }
    }

    /// Deletes all but the newest `count` events. Returns how many were deleted.
    @discardableResult
    public func pruneEvents(keepingLast count: Int) async throws -> Int {
        guard count >= 0 else { throw CartStoreError(.invalidLimit, "keep count must be ≥ 0 (got \(count))") }
        return try await writer.write { db in
            let cutoff = try Self.latestSeq(db) - Int64(count)
            return try CartEventRow.filter(CartEventRow.Columns.seq <= cutoff).deleteAll(db)
        }
    }

    /// Deletes the events committed before `date`. Returns how many were deleted.
    @discardableResult
    public func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await writer.write { db in
            try CartEventRow.filter(CartEventRow.Columns.committedAt < date.millisecondsSince1970).deleteAll(db)
        }
    }

    static func checkEventQuery(after seq: Int64, limit: Int, carts: Set<String>?) throws {
        guard seq >= 0 else { throw CartStoreError(.invalidSince, "since must be ≥ 0 (got \(seq))") }
        guard (1...maxEventPage).contains(limit) else {
            throw CartStoreError(.invalidLimit, "limit must be 1…\(maxEventPage) (got \(limit))")
        }
        for id in carts ?? [] { try CartLimits.checkCartID(id) }
    }

    static func readEvents(after seq: Int64, limit: Int, carts: Set<String>?, _ db: Database) throws -> EventLogRead {
        let latest = try latestSeq(db)
        guard seq <= latest else {
            throw CartStoreError(.sinceAhead, "since \(seq) is ahead of the newest event \(latest): this log is not the one you followed")
        }
        let oldest = try oldestRetainedSeq(db)
        guard seq + 1 >= oldest else {
            return .tooOld(oldestRetainedSeq: oldest, latestSeq: latest)
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

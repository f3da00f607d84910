import Foundation

/// The answer of the event log to "what happened after seq N?".
public enum EventLogRead: Sendable, Hashable {
    /// The events after the asked seq, in seq order, at most the asked limit. When fewer than
    /// the limit came back, `latestSeq` was the newest event at the time of the read.
    case events([CartEvent], latestSeq: Int64)
    /// Events after the asked seq were pruned: there is no gap-free answer. Take a snapshot
    /// and follow the log from the snapshot's seq instead.
    case tooOld(oldestRetainedSeq: Int64, latestSeq: Int64)
}

// Reads on a SQLite file run in one transaction each. A small one (one cart, a snapshot of at
// most 16 carts, a page of at most 64 events) runs on the calling thread, on a read-only
// connection of its own (tens of microseconds; in WAL mode it never waits for a commit);
// larger ones, small ones while every such connection is in use, and every read of an
// in-memory store, run on GRDB's queues.
extension CartStore {
    /// The cart with this id, or `nil` if it was never changed.
    public func cart(_ cartID: String) async throws -> Cart? {
        try CartLimits.checkCartID(cartID)
        return try await backend.cart(cartID)
    }

    /// Every cart, ordered by id.
    public func carts() async throws -> [Cart] {
        try await snapshot().carts
    }

    /// The carts (all, or those with the given ids that exist), ordered by id, and the seq they
    /// reflect, read at one point of the log: apply events after `seq` to stay current.
    ///
    /// On a SQLite file a snapshot of at most 16 carts (named, or the whole store when it holds
    /// no more) is read on the calling thread (tens of microseconds, never behind a commit);
    /// others on GRDB's queues.
    public func snapshot(of cartIDs: Set<String>? = nil) async throws -> CartSnapshot {
        for id in cartIDs ?? [] { try CartLimits.checkCartID(id) }
        return try await backend.snapshot(of: cartIDs)
    }

    /// The largest page `events(after:limit:carts:)` returns.
    public static let maxEventPage = 10_000

    /// The events after `seq` (0: from the start), optionally only those of some carts.
    ///
    /// On SQLite, a page after a `since` among the newest 1 024 events committed since the
    /// store opened (or last pruned) is answered from memory, without a read, unless a commit
    /// is landing at that moment; otherwise a page of at most 64 events is read on the calling
    /// thread of a file, like a small snapshot.
    ///
    /// - Throws: `invalidSince` for a negative seq, `sinceAhead` for a seq newer than the log
    ///   (the caller followed another database), `invalidLimit` outside 1…`maxEventPage`.
    public func events(after seq: Int64, limit: Int = 1_000, carts: Set<String>? = nil) async throws -> EventLogRead {
        try Self.checkEventQuery(after: seq, limit: limit, carts: carts)
        return try await backend.events(after: seq, limit: limit, carts: carts)
    }

    /// The seq of the newest committed event; 0 when nothing was ever committed.
    public func latestSeq() async throws -> Int64 {
        try await backend.latestSeq()
    }

    /// The oldest seq still in the log; `latestSeq() + 1` when the log is empty.
    public func oldestRetainedSeq() async throws -> Int64 {
        try await backend.oldestRetainedSeq()
    }

    /// Deletes all but the newest `count` events. Returns how many were deleted.
    @discardableResult
    public func pruneEvents(keepingLast count: Int) async throws -> Int {
        guard count >= 0 else { throw CartStoreError(.invalidLimit, "keep count must be ≥ 0 (got \(count))") }
        return try await backend.pruneEvents(keepingLast: count)
    }

    /// Deletes the events committed before `date`. Returns how many were deleted.
    @discardableResult
    public func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await backend.pruneEvents(committedBefore: date)
    }

    static func checkEventQuery(after seq: Int64, limit: Int, carts: Set<String>?) throws {
        guard seq >= 0 else { throw CartStoreError(.invalidSince, "since must be ≥ 0 (got \(seq))") }
        guard (1...maxEventPage).contains(limit) else {
            throw CartStoreError(.invalidLimit, "limit must be 1…\(maxEventPage) (got \(limit))")
        }
        for id in carts ?? [] { try CartLimits.checkCartID(id) }
    }

}

import Foundation
import GRDB
import Testing

@testable import CartStore

/// The log's tail a SQLite store answers from memory (`RecentEvents`): every page must be the
/// one the log itself gives.
@Suite("Recent events")
struct RecentEventsTests {
    /// The page as the log itself holds it, read in a transaction of the writer's connection.
    private static func fromTheLog(_ store: CartStore, after seq: Int64, limit: Int, carts: Set<String>?) async throws
        -> EventLogRead
    {
        let backend = try #require(store.backend as? SQLiteBackend)
        return try await backend.writer.read { db in try SQLiteBackend.readEvents(after: seq, limit: limit, carts: carts, db) }
    }

    private static func recent(_ store: CartStore) throws -> RecentEvents {
        try #require(store.backend as? SQLiteBackend).recent
    }

    /// Commits `count` changes spread over three carts, some of them refused (a refused change
    /// takes no seq), concurrently so that batches hold several.
    private static func commit(_ count: Int, to store: CartStore) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    for index in stride(from: writer, to: count, by: 4) {
                        let cart = ["a", "b", "c"][index % 3]
                        _ = try await store.addItem(cartID: cart, sku: "sku\(index % 5)", quantity: 1, unitPriceCents: 10)
                        if index % 7 == 0 {
                            // Refused: no such line.
                            _ = try? await store.setQuantity(cartID: cart, sku: "none", quantity: 2)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func everyPageOfTheTailIsTheLogsOwn() async throws {
        let store = try CartStore.inMemory()
        try await Self.commit(60, to: store)
        let latest = try await store.latestSeq()
        #expect(latest == 60)
        #expect(try Self.recent(store).newestSeq == 60, "held in memory")
        for since in 0...latest {
            for limit in [1, 3, 100] {
                for carts: Set<String>? in [nil, ["b"], ["a", "c"], ["nobody"]] {
                    let answered = try await store.events(after: since, limit: limit, carts: carts)
                    let logged = try await Self.fromTheLog(store, after: since, limit: limit, carts: carts)
                    #expect(answered == logged, "since \(since), limit \(limit), carts \(String(describing: carts))")
                }
            }
        }
        await #expect(throws: CartStoreError.self) { try await store.events(after: latest + 1) }
    }

    @Test func aSinceOlderThanWhatIsHeldIsReadFromTheLog() async throws {
        let store = try CartStore.inMemory()
        let recent = try Self.recent(store)
        try await Self.commit(recent.capacity + 40, to: store)
        let latest = try await store.latestSeq()
        #expect(recent.page(after: 0, limit: 10, carts: nil) == nil, "the oldest were forgotten")
        #expect(recent.page(after: latest - Int64(recent.capacity), limit: 10, carts: nil) != nil)
        for since in [0, 39, 40, 41, latest - Int64(recent.capacity) - 1, latest - Int64(recent.capacity), latest - 1] {
            let answered = try await store.events(after: since, limit: 50, carts: ["a"])
            #expect(answered == (try await Self.fromTheLog(store, after: since, limit: 50, carts: ["a"])), "since \(since)")
        }
    }

    @Test func afterAPruneWhatWasPrunedIsTooOldThoughItHadBeenHeld() async throws {
        let store = try CartStore.inMemory()
        try await Self.commit(10, to: store)
        #expect(try await store.events(after: 0, limit: 100).eventSeqs == Array(1...10))
        #expect(try await store.pruneEvents(keepingLast: 4) == 6)
        #expect(try await store.events(after: 0) == .tooOld(oldestRetainedSeq: 7, latestSeq: 10))
        #expect(try await store.events(after: 6).eventSeqs == [7, 8, 9, 10])
        // The next commit is held again, and the log's answer is unchanged around it.
        _ = try await store.addItem(cartID: "a", sku: "tea", quantity: 1, unitPriceCents: 10)
        #expect(try Self.recent(store).newestSeq == 11)
        #expect(try await store.events(after: 0) == .tooOld(oldestRetainedSeq: 7, latestSeq: 11))
        #expect(try await store.events(after: 6).eventSeqs == [7, 8, 9, 10, 11])
        #expect(try await store.events(after: 10).eventSeqs == [11])
        #expect(try await store.pruneEvents(committedBefore: Date().addingTimeInterval(60)) == 5)
        #expect(try await store.events(after: 10) == .tooOld(oldestRetainedSeq: 12, latestSeq: 11))
        #expect(try await store.events(after: 11) == .events([], latestSeq: 11))
    }

    @Test func aStoreReopenedReadsTheLogUntilItsFirstCommit() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        var store = try CartStore(path: path)
        try await Self.commit(12, to: store)
        let before = try await store.events(after: 3, limit: 100, carts: ["b"])
        try store.close()
        store = try CartStore(path: path)
        defer { try? store.close() }
        #expect(try Self.recent(store).newestSeq == nil, "nothing committed in this process yet")
        #expect(try await store.latestSeq() == 12)
        #expect(try await store.events(after: 3, limit: 100, carts: ["b"]) == before)
        _ = try await store.addItem(cartID: "b", sku: "tea", quantity: 1, unitPriceCents: 10)
        #expect(try await store.events(after: 3, limit: 100, carts: ["b"]).eventSeqs == before.eventSeqs + [13])
        #expect(try await store.events(after: 12).eventSeqs == [13])
    }
}

extension EventLogRead {
    fileprivate var eventSeqs: [Int64] {
        guard case .events(let events, _) = self else { return [] }
        return events.map(\.seq)
    }
}

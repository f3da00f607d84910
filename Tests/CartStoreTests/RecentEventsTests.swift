import Foundation
import GRDB
import NIOConcurrencyHelpers
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

extension RecentEventsTests {
    @Test func aRunWithAGapStartsAgainAndNothingIsAnsweredWhileACommitIsInFlight() {
        let recent = RecentEvents(capacity: 4)
        func events(_ seqs: ClosedRange<Int64>) -> [CartEvent] {
            seqs.map { CartEvent(seq: $0, cartID: "a", change: .cartCleared, version: $0, committedAt: Date(millisecondsSince1970: 0)) }
        }
        recent.didCommit(events(1...3))
        #expect(recent.page(after: 0, limit: 10, carts: nil)?.eventSeqs == [1, 2, 3])
        recent.willCommit()
        #expect(recent.page(after: 0, limit: 10, carts: nil) == nil, "the file may already show the batch")
        #expect(recent.newestSeq == nil)
        recent.commitFailed()
        #expect(recent.newestSeq == 3)
        // 4 and 5 never reached it: a page after 2 would skip them.
        recent.didCommit(events(6...6))
        #expect(recent.page(after: 2, limit: 10, carts: nil) == nil)
        #expect(recent.page(after: 5, limit: 10, carts: nil)?.eventSeqs == [6])
        // Four at most: 6 is forgotten.
        recent.didCommit(events(7...10))
        #expect(recent.page(after: 5, limit: 10, carts: nil) == nil)
        #expect(recent.page(after: 6, limit: 2, carts: nil) == .events(events(7...8), latestSeq: 10))
        #expect(recent.page(after: 10, limit: 10, carts: nil) == .events([], latestSeq: 10))
        #expect(recent.page(after: 11, limit: 10, carts: nil) == nil, "ahead: the log says so")
        #expect(recent.page(after: .max, limit: 10, carts: nil) == nil, "a caller's number, however large")
    }

    /// Readers of a file see a batch from the end of its COMMIT; what the store answers from
    /// memory must never be behind that.
    @Test func readsWhileCommitsLandAreNeverBehindTheFile() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        defer { try? store.close() }
        _ = try await store.addItem(cartID: "c1", sku: "tea", quantity: 1, unitPriceCents: 10)
        let finished = NIOLockedValueBox(false)
        let writing = Task {
            defer { finished.withLockedValue { $0 = true } }
            try await Self.commit(600, to: store)
        }
        var reads = 0
        var behind: [String] = []
        // Reads of a file and from memory do not suspend: each round yields, or the loop could
        // keep a thread of Swift concurrency's pool from the writers (and from other tests).
        // The deadline only stops the reading on a machine too busy to finish the writes soon.
        let deadline = ContinuousClock.now + .seconds(60)
        repeat {
            await Task.yield()
            let seen = try await store.snapshot(of: ["c1"]).seq
            let latest = try await store.latestSeq()
            if latest < seen { behind.append("latestSeq \(latest) after a snapshot at \(seen)") }
            let since = max(0, seen - 2)
            if case .events(let page, let pageLatest) = try await store.events(after: since, limit: 100) {
                if pageLatest < seen { behind.append("a page's latestSeq \(pageLatest) after a snapshot at \(seen)") }
                if page.map(\.seq) != Array(stride(from: since + 1, through: pageLatest, by: 1).prefix(100)) {
                    behind.append("a page after \(since) with a gap: \(page.map(\.seq)), latestSeq \(pageLatest)")
                }
            }
            reads += 1
        } while !finished.withLockedValue({ $0 }) && ContinuousClock.now < deadline
        try await writing.value
        #expect(behind.isEmpty, "\(behind.count) of \(reads) reads: \(behind.prefix(5))")
        #expect(reads > 20, "reads ran while the commits landed")
    }

    @Test func aClosedStoreAnswersNothingFromMemory() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"))
        _ = try await store.addItem(cartID: "a", sku: "tea", quantity: 1, unitPriceCents: 10)
        #expect(try Self.recent(store).newestSeq == 1)
        try store.close()
        await #expect(throws: (any Error).self) { try await store.events(after: 0) }
        await #expect(throws: (any Error).self) { try await store.latestSeq() }
    }
}

extension EventLogRead {
    fileprivate var eventSeqs: [Int64] {
        guard case .events(let events, _) = self else { return [] }
        return events.map(\.seq)
    }
}

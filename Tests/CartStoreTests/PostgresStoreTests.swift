import Foundation
import FanoutTestSupport
import Testing
@testable import CartStore

/// What only the PostgreSQL engine does: several stores on one database.
@Suite(
    "PostgreSQL store", .timeLimit(.minutes(2)),
    .enabled(if: ProcessInfo.processInfo.environment["FANOUT_POSTGRES_URL"] != nil, "set FANOUT_POSTGRES_URL to a PostgreSQL database to run the PostgreSQL store tests"))
struct PostgresStoreTests {
    @Test func twoStoresOnOneDatabaseSeeEachOthersCommitsInOneOrder() async throws {
        let url = try #require(ProcessInfo.processInfo.environment["FANOUT_POSTGRES_URL"])
        let first = try await CartStore.open(postgresURL: url)
        let second = try await CartStore.open(postgresURL: url)
        defer { try? first.close(); try? second.close() }
        let seenByFirst = RecordingObserver()
        let seenBySecond = RecordingObserver()
        first.observers.add(seenByFirst)
        second.observers.add(seenBySecond)
        let start = try await first.latestSeq()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                let store = writer % 2 == 0 ? first : second
                group.addTask {
                    for index in 0..<25 {
                        try await store.addItem(cartID: "c\(index % 5)", sku: "s\(writer)", quantity: 1, unitPriceCents: 10)
                    }
                }
            }
            try await group.waitForAll()
        }
        let expected = Array((start + 1)...(start + 100))
        await eventually("both stores delivered all 100 commits") {
            seenByFirst.seqs.count >= 100 && seenBySecond.seqs.count >= 100
        }
        #expect(firstDifference(seenByFirst.seqs, expected) == nil, "the first store's deliveries")
        #expect(firstDifference(seenBySecond.seqs, expected) == nil, "the second store's deliveries")
        #expect(seenByFirst.received == seenBySecond.received, "the same events, the same order")
        let snapshot = try await second.snapshot()
        #expect(snapshot.seq == start + 100)
        #expect(snapshot.carts.filter { $0.id.hasPrefix("c") }.map(\.itemCount).reduce(0, +) >= 100)
    }
}

/// Where two sequences first differ (index, and each side's element there), or nil: a short
/// failure message for long lists.
func firstDifference<T: Equatable>(_ a: [T], _ b: [T]) -> String? {
    for index in 0..<max(a.count, b.count) {
        let left = index < a.count ? a[index] : nil
        let right = index < b.count ? b[index] : nil
        if left != right {
            return "at \(index): \(left.map { "\($0)" } ?? "end") vs \(right.map { "\($0)" } ?? "end") (\(a.count) vs \(b.count) elements)"
        }
    }
    return nil
}

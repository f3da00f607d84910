import Foundation
import FanoutTestSupport
import Testing
@testable import CartStore

@Suite("Event stream")
struct EventStreamTests {
    @Test func backlogThenLiveWithoutGapOrDuplicateUnderConcurrentWrites() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        for index in 0..<30 {
            try await store.addItem(cartID: "c", sku: "pre\(index)", quantity: 1, unitPriceCents: 1)
        }
        let total = 30 + 200
        // Small pages and buffer: the boundary between log and live is crossed many times.
        let reader = Task {
            var seqs: [Int64] = []
            for try await event in store.eventStream(since: 10, bufferLimit: 8) {
                seqs.append(event.seq)
                if seqs.count == total - 10 { break }
            }
            return seqs
        }
        try await writeConcurrently(to: store, writers: 4, perWriter: 50)
        #expect(try await reader.value == Array(11...Int64(total)))
    }

    @Test func aSlowConsumerCatchesUpFromTheLogWithNothingLost() async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "c", sku: "first", quantity: 1, unitPriceCents: 1)
        var iterator = store.eventStream(since: 0, bufferLimit: 4).makeAsyncIterator()
        #expect(try await iterator.next()?.seq == 1)  // now live
        // Nobody reads while 100 events commit: the 4-event buffer overflows and the writer
        // goes on regardless (this loop would hang if it waited for the consumer).
        for index in 0..<100 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        var seqs: [Int64] = []
        while seqs.count < 100, let event = try await iterator.next() {
            seqs.append(event.seq)
        }
        #expect(seqs == Array(2...101))
        // And it is live again afterwards.
        try await store.addItem(cartID: "c", sku: "last", quantity: 1, unitPriceCents: 1)
        #expect(try await iterator.next()?.seq == 102)
    }

    @Test func cartFilterAndSinceZero() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<10 {
            try await store.addItem(cartID: index.isMultiple(of: 2) ? "a" : "b", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        var iterator = store.eventStream(since: 0, carts: ["a"]).makeAsyncIterator()
        var seqs: [Int64] = []
        for _ in 0..<5 { seqs.append(try await iterator.next()!.seq) }
        #expect(seqs == [1, 3, 5, 7, 9])
        try await store.addItem(cartID: "b", sku: "x", quantity: 1, unitPriceCents: 1)
        try await store.addItem(cartID: "a", sku: "y", quantity: 1, unitPriceCents: 1)
        #expect(try await iterator.next()?.seq == 12)
    }

    @Test func prunedHistoryIsReportedNotSkipped() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<10 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        try await store.pruneEvents(keepingLast: 3)
        var iterator = store.eventStream(since: 2).makeAsyncIterator()
        await #expect { try await iterator.next() } throws: { CartStoreError.code($0) == .historyTooOld }
    }

    @Test func cancellingAWaitingConsumerEndsItAndReleasesItsObserver() async throws {
        let store = try CartStore.inMemory()
        let consumer = Task {
            for try await _ in store.eventStream() {}
        }
        await eventually("the stream to register") { store.observers.count == 1 }
        consumer.cancel()
        await #expect(throws: CancellationError.self) { try await consumer.value }
        #expect(store.observers.count == 0)
    }
}

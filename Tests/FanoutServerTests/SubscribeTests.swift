import CartStore
import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWSClient
import NIOWebSocket
import Testing

@testable import FanoutServer

@Suite("WebSocket subscriptions", .timeLimit(.minutes(2)))
struct SubscribeTests {
    @Test func welcomeThenSnapshotThenLiveEvents() async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 50)
        try await withServer(store: store) { port, server in
            let subscriber = TestSubscriber(port: port)
            try await subscriber.subscribe()
            await eventually("snapshot") { !subscriber.snapshots.isEmpty }
            guard case .welcome(let welcome) = subscriber.messages.first else {
                Issue.record("the first message must be the welcome")
                return
            }
            #expect(welcome.latestSeq == 1)
            #expect(welcome.leaseTTL == 5)
            #expect(welcome.databaseID == store.databaseID, "the welcome says which database")
            let snapshot = try #require(subscriber.snapshots.first)
            #expect(snapshot.reason == .initial)
            #expect(snapshot.seq == 1)
            #expect(snapshot.carts.first?.items.first?.sku == "apple")
            let commit = try await store.addItem(cartID: "alice", sku: "pear", quantity: 2, unitPriceCents: 80)
            await eventually("the live event") { subscriber.events.count == 1 }
            #expect(subscriber.events == [commit.event])
            await subscriber.close()
        }
    }

    @Test func concurrentClientsReceiveIdenticalSequencesUnderConcurrentWrites() async throws {
        let store = try CartStore.inMemory()
        try await withServer(store: store) { port, server in
            let subscribers = (0..<6).map { _ in TestSubscriber(port: port) }
            for subscriber in subscribers { try await subscriber.subscribe(since: 0) }
            await eventually("all subscribed") { server.hub.stats.subscribers == 6 }
            try await writeConcurrently(to: store, writers: 4, perWriter: 40)
            for subscriber in subscribers {
                await eventually("all 160 events") { subscriber.events.count >= 160 }
                #expect(subscriber.events.map(\.seq) == Array(1...160))
            }
            let log = try await store.events(after: 0, limit: 1000)
            guard case .events(let events, _) = log else {
                Issue.record("log")
                return
            }
            #expect(subscribers.allSatisfy { $0.events == events })
            for subscriber in subscribers { await subscriber.close() }
        }
    }

    @Test func resumeWithSinceCrossesBacklogAndLiveWithoutGapOrDuplicate() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<50 {
            try await store.addItem(cartID: index.isMultiple(of: 2) ? "a" : "b", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        try await withServer(store: store) { port, _ in
            let writer = Task {
                for index in 50..<150 {
                    try await store.addItem(cartID: index.isMultiple(of: 2) ? "a" : "b", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
                }
            }
            let all = TestSubscriber(port: port)
            let onlyA = TestSubscriber(port: port)
            try await all.subscribe(since: 20)
            try await onlyA.subscribe(carts: ["a"], since: 20)
            try await writer.value
            await eventually("130 events") { all.events.count >= 130 }
            #expect(all.events.map(\.seq) == Array(21...150))
            #expect(all.snapshots.isEmpty)
            await eventually("the a events") { onlyA.events.count >= 65 }
            #expect(onlyA.events.map(\.seq) == Array(stride(from: 21, through: 150, by: 2)))
            #expect(onlyA.events.allSatisfy { $0.cartID == "a" })
            await all.close()
            await onlyA.close()
        }
    }

    @Test func tooOldOrAheadSinceGetsASnapshotWithTheReason() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<10 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        try await store.pruneEvents(keepingLast: 3)
        try await withServer(store: store) { port, _ in
            let old = TestSubscriber(port: port)
            try await old.subscribe(since: 2)
            let ahead = TestSubscriber(port: port)
            try await ahead.subscribe(since: 500)
            await eventually("snapshots") { !old.snapshots.isEmpty && !ahead.snapshots.isEmpty }
            #expect(old.snapshots.first?.reason == .sinceTooOld)
            #expect(old.snapshots.first?.seq == 10)
            #expect(ahead.snapshots.first?.reason == .sinceAhead)
            let next = try await store.addItem(cartID: "c", sku: "new", quantity: 1, unitPriceCents: 1)
            await eventually("the next event") { old.events.count == 1 }
            #expect(old.events.first?.seq == next.event.seq)
            await old.close()
            await ahead.close()
        }
    }

    @Test func aSilentClientExpiresWithinTheLeaseWhileOthersKeepReceiving() async throws {
        let store = try CartStore.inMemory()
        // 3 s: a lease short enough to wait for, long enough for a loaded machine.
        try await withServer({ $0.leaseTTL = .seconds(3) }, store: store) { port, server in
            let silent = TestSubscriber(port: port)
            let alive = TestSubscriber(port: port)
            try await silent.subscribe()
            try await alive.subscribe()
            await eventually("both subscribed") { !silent.snapshots.isEmpty && !alive.snapshots.isEmpty }
            silent.stopHeartbeats()
            // When exactly is `LeaseTests`' to check, on a virtual clock.
            let close = try await silent.closeFrame()
            #expect(close?.closeCode == .unknown(FanoutCloseCode.leaseExpired.rawValue))
            #expect(server.hub.stats.expiries == 1)
            try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
            await eventually("the survivor's event") { alive.events.count == 1 }
            #expect(server.hub.stats.subscribers == 1)
            await alive.close()
        }
    }

    @Test func serverHeartbeatsCarryTheLatestSeq() async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await withServer(store: store) { port, _ in
            let subscriber = TestSubscriber(port: port)
            try await subscriber.subscribe()
            await eventually("a heartbeat") { subscriber.messages.contains { $0 == .heartbeat(latestSeq: 1) } }
            await subscriber.close()
        }
    }

    @Test func badMessagesGetErrorsAndProtocolViolationsAClose() async throws {
        try await withServer { port, _ in
            let subscriber = TestSubscriber(port: port)
            try await subscriber.sendRaw(.text("not json"))
            try await subscriber.sendRaw(.text(#"{"type":"dance"}"#))
            try await subscriber.send(.subscribe(carts: ["bad id"], since: nil))
            try await subscriber.send(.subscribe(carts: nil, since: -1))
            await eventually("four errors") { subscriber.errors.count == 4 }
            #expect(subscriber.errors == ["bad_message", "bad_message", "invalid_cart_id", "invalid_since"])
            // Still usable after mistakes.
            try await subscriber.send(.subscribe(carts: nil, since: nil))
            await eventually("snapshot") { !subscriber.snapshots.isEmpty }
            try await subscriber.send(.subscribe(carts: nil, since: nil))
            await eventually("already subscribed") { subscriber.errors.last == "already_subscribed" }
            try await subscriber.sendRaw(.binary(ByteBuffer(string: "{}")))
            let close = try await subscriber.closeFrame()
            #expect(close?.closeCode == .policyViolation)
            #expect(subscriber.errors.last == "binary_not_supported")
        }
    }

    @Test func anOversizedMessageClosesWith1009() async throws {
        try await withServer { port, _ in
            let subscriber = TestSubscriber(port: port)
            let huge = String(repeating: "x", count: 70_000)
            try await subscriber.sendRaw(.text(#"{"type":"heartbeat","pad":"\#(huge)"}"#))
            let close = try await subscriber.closeFrame()
            #expect(close?.closeCode == .messageTooLarge)
        }
    }

    @Test func tokenAndOriginAreEnforcedOnUpgrade() async throws {
        try await withServer({
            $0.token = "t0k"
            $0.allowedOrigins = ["http://ok.example"]
        }) { port, _ in
            await #expect(throws: (any Error).self) { _ = try await TestSubscriber(port: port).closeFrame() }
            await #expect(throws: (any Error).self) {
                _ = try await TestSubscriber(port: port, headers: [.authorization: "Bearer t0k", .origin: "http://evil.example"])
                    .closeFrame()
            }
            let withHeader = TestSubscriber(port: port, headers: [.authorization: "Bearer t0k", .origin: "http://ok.example"])
            try await withHeader.subscribe()
            await eventually("snapshot with header token") { !withHeader.snapshots.isEmpty }
            let withQuery = TestSubscriber(port: port, path: "/subscribe?token=t0k")
            try await withQuery.subscribe()
            await eventually("snapshot with query token") { !withQuery.snapshots.isEmpty }
            await withHeader.close()
            await withQuery.close()
        }
    }

    @Test func mutationResponsesCountDeliveries() async throws {
        let store = try CartStore.inMemory()
        try await withServer(store: store) { port, server in
            let a = TestSubscriber(port: port)
            let b = TestSubscriber(port: port)
            let all = TestSubscriber(port: port)
            try await a.subscribe(carts: ["x"])
            try await b.subscribe(carts: ["x", "y"])
            try await all.subscribe()
            // Live ones are counted without being walked: per cart, and for all carts.
            await eventually("all three live") { server.hub.stats.liveSubscribers == 3 }
            func delivered(to cart: String) async throws -> Int {
                let commit = try await store.addItem(cartID: cart, sku: "s", quantity: 1, unitPriceCents: 1)
                return server.hub.deliveredCount(seq: commit.event.seq)
            }
            #expect(try await delivered(to: "x") == 3)
            #expect(try await delivered(to: "y") == 2)
            #expect(try await delivered(to: "z") == 1)
            await all.close()
            await b.close()
            await eventually("two gone") { server.hub.stats.subscribers == 1 }
            #expect(try await delivered(to: "z") == 0)
            #expect(try await delivered(to: "y") == 0)
            #expect(try await delivered(to: "x") == 1)
            await a.close()
        }
    }
}

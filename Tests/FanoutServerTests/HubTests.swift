import CartStore
import FanoutTestSupport
import Foundation
import GRDB
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import FanoutServer

@Suite("Fan-out hub")
struct HubTests {
    @Test func aSubscriberThatDoesNotReadIsDroppedAndNobodyWaitsForIt() async throws {
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 8))
        let (stuck, stuckTransport) = try await harness.live()
        let (_, reader) = try await harness.live()
        try await harness.onLoop { stuckTransport.isWritable = false }
        // Commits while `stuck` never reads: every one returns, `reader` gets them all.
        for index in 0..<50 {
            try await harness.add(sku: "s\(index)")
            try await eventually("event \(index + 1) read") { try await harness.onLoop { try reader.seqs().count == index + 1 } }
        }
        #expect(try await harness.onLoop { stuck.isEnded })
        #expect(try await harness.onLoop { try reader.seqs() } == Array(1...50))
        #expect(try await harness.onLoop { stuckTransport.closedFor } == .tooSlow, "its connection must be told why")
        #expect(harness.hub.stats.slowConsumerDrops == 1)
        #expect(harness.hub.stats.subscribers == 1)
        #expect(harness.hub.deliveredCount(seq: 50) == 1)
    }

    @Test func eventsAreEncodedOnceAndSharedByEverySubscriber() async throws {
        let harness = try HubHarness()
        var recording: [RecordingTransport] = []
        for _ in 0..<3 { recording.append(try await harness.live().1) }
        let transports = recording
        try await harness.add(sku: "a")
        try await eventually("all three written") {
            try await harness.onLoop { transports.allSatisfy { !$0.written.isEmpty } }
        }
        let addresses = try await harness.onLoop {
            transports.map { $0.written[0].withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } }
        }
        // Same storage, not equal copies.
        #expect(Set(addresses).count == 1)
    }

    @Test func subscribersAreCappedAndRefusedWhileShuttingDown() async throws {
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, maxSubscribers: 1))
        let (a, aTransport) = try await harness.connect()
        let (b, bTransport) = try await harness.connect()
        #expect(try await harness.onLoop { (a.isEnded, bTransport.closedFor) } == (false, .serverFull))
        #expect(try await harness.onLoop { b.isEnded })
        harness.hub.shutDown()
        try await eventually("a ended") { try await harness.onLoop { aTransport.closedFor == .shuttingDown } }
        let (_, cTransport) = try await harness.connect()
        #expect(try await harness.onLoop { cTransport.closedFor } == .shuttingDown)
        let stats = harness.hub.stats
        #expect(stats.subscribers == 0)
        #expect(stats.ended["serverFull"] == 1)
        #expect(stats.ended["shuttingDown"] == 2)
    }

    /// A subscriber that the small ring leaves behind while writers race it (a busy machine
    /// delays its loop's passes) is ended as too slow and resumes from the log with `since`, as a
    /// client does: what it receives across its connections is every event after 30, once.
    @Test func aSubscriberCatchesUpFromTheLogThenTheRingUnderConcurrentWriters() async throws {
        // A small ring and small pages: the catch-up must read several pages while the ring moves.
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 16, catchUpPageSize: 7))
        for index in 0..<100 { try await harness.add(sku: "s\(index)") }
        let writers = Task { try await writeConcurrently(to: harness.store, writers: 4, perWriter: 50) }
        var received: [Int64] = []
        var connections = 0
        while received.last != 300, connections < 50 {
            connections += 1
            let since = received.last ?? 30
            let (subscriber, transport) = try await harness.connect()
            try await harness.onLoop { subscriber.subscribe(carts: nil, since: since) }
            // The writers' 200 commits may take longer than the usual 10 s on a machine busy with
            // the whole suite: waiting for them is the point, so the bound is a minute.
            try await eventually(timeout: .seconds(60), "everything after \(since), or an end") {
                try await harness.onLoop { try transport.seqs().last == 300 || subscriber.isEnded }
            }
            let (seqs, phase) = try await harness.onLoop { (try transport.seqs(), subscriber.phase) }
            if case .ended(let reason) = phase { #expect(reason == .tooSlow, "ended as \(reason)") }
            received += seqs
            try await harness.onLoop { subscriber.end(.peerClosed) }
        }
        try await writers.value
        #expect(received == Array(31...300), "no gap, no duplicate, over \(connections) connections")
    }

    @Test func aSnapshotGoesOutInBoundedParts() async throws {
        let harness = try HubHarness()
        let cartCount = SnapshotParts.maxCarts * 2 + 3
        for index in 0..<cartCount { try await harness.add("cart\(index)", sku: "a") }
        let (subscriber, transport) = try await harness.connect()
        try await harness.onLoop { subscriber.subscribe(carts: nil, since: nil) }
        try await eventually("live") { try await harness.onLoop { subscriber.phase == .live } }
        let frames = try await harness.onLoop { transport.written }
        let parts = try frames.map { frame in
            let payload = try #require(WireFrameTests.decode(frame)).payload
            let object = try #require(try JSONSerialization.jsonObject(with: Data(payload.readableBytesView)) as? [String: Any])
            return PartSummary(
                carts: (object["carts"] as? [Any])?.count ?? -1, seq: object["seq"] as? Int ?? -1, more: object["more"] as? Bool ?? false)
        }
        #expect(
            parts == [
                PartSummary(carts: SnapshotParts.maxCarts, seq: cartCount, more: true),
                PartSummary(carts: SnapshotParts.maxCarts, seq: cartCount, more: true),
                PartSummary(carts: 3, seq: cartCount, more: false),
            ])
    }

    /// Large carts: parts end before `maxBytes` (unless one cart alone is larger), and their
    /// carts, read back in order, are the snapshot's, with the seq and reason on every part.
    @Test func snapshotPartsStayWithinTheirBytesAndReadBackAsTheSnapshot() throws {
        let carts = (0..<20).map { index in
            Cart(
                id: "c\(index)", version: 1,
                items: (0..<300).map { CartItem(sku: "s\($0)", quantity: 1, unitPriceCents: 1, name: String(repeating: "n", count: 60)) })
        }
        let parts = SnapshotParts.encode(CartSnapshot(carts: carts, seq: 7), reason: .sinceTooOld)
        #expect(parts.count > 1)
        var readBack: [Cart] = []
        for (index, part) in parts.enumerated() {
            let isLast = index == parts.count - 1
            #expect(part.json.readableBytes <= SnapshotParts.maxBytes)
            #expect(part.seq == (isLast ? 7 : nil), "only the last part is one to resume after")
            let message = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(part.json.readableBytesView))
            guard case .snapshot(let partCarts, let seq, let reason, let more) = message else {
                Issue.record("not a snapshot: \(message)")
                continue
            }
            #expect(seq == 7 && reason == .sinceTooOld && more == !isLast)
            readBack += partCarts
        }
        #expect(readBack == carts)
    }

    struct PartSummary: Equatable, Sendable {
        var carts: Int
        var seq: Int
        var more: Bool
    }

    @Test func aCatchUpAheadOfThisServersRingWaitsForItInsteadOfRereadingTheLog() async throws {
        // Three commits this hub never heard of (as another server's, still on their way here).
        let store = try CartStore.inMemory()
        for sku in ["a", "b", "c"] { try await store.addItem(cartID: "c", sku: sku, quantity: 1, unitPriceCents: 1) }
        let harness = try HubHarness(store: store)
        let (subscriber, transport) = try await harness.connect()
        try await harness.onLoop { subscriber.subscribe(carts: nil, since: 1) }
        // It sends 2 and 3 from the log, then waits for the ring (not reading the log in a loop).
        await eventually("waiting for the ring") { harness.hub.aheadOfRing.count == 1 }
        #expect(try await harness.onLoop { try transport.seqs() } == [2, 3])
        #expect(try await harness.onLoop { subscriber.phase } == .catchingUp)
        try await harness.add(sku: "d")
        try await eventually("live") { try await harness.onLoop { subscriber.phase == .live } }
        try await eventually("4 sent") { try await harness.onLoop { try transport.seqs().count == 3 } }
        #expect(try await harness.onLoop { try transport.seqs() } == [2, 3, 4])
    }

    @Test func aCatchUpThatCannotReadTheLogEndsTheSubscriberWithAReason() async throws {
        let path = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        // The ring keeps one event: a subscriber after 0 must read the log.
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 1), store: try CartStore(path: path))
        for sku in ["a", "b", "c"] { try await harness.add(sku: sku) }
        // A prune (of nothing) makes the store forget the recent events it keeps in memory,
        // which would answer without reading the log.
        try await harness.store.pruneEvents(keepingLast: 3)
        // The log becomes unreadable under the server (as a damaged file would be).
        try await DatabaseQueue(path: path).write { try $0.execute(sql: "DROP TABLE cart_events") }
        let (subscriber, transport) = try await harness.connect()
        try await harness.onLoop { subscriber.subscribe(carts: nil, since: 0) }
        try await eventually("ended") { try await harness.onLoop { transport.closedFor != nil } }
        #expect(try await harness.onLoop { transport.closedFor } == .failed)
        #expect(harness.hub.stats.ended["failed"] == 1)
        #expect(harness.hub.stats.subscribers == 0)
    }
}

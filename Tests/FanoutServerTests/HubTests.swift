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

/// A transport that records what the hub writes, for tests. It lives on its subscriber's loop;
/// tests reach it through `loop.submit`.
final class RecordingTransport: SubscriberTransport, @unchecked Sendable {
    let loop: any EventLoop
    var isWritable = true
    var written: [ByteBuffer] = []
    var closedFor: EndReason?
    /// Called on every flush: a test can close the connection there, as a reset socket does.
    var onFlush: (() -> Void)?

    init(loop: any EventLoop) {
        self.loop = loop
    }

    var framing: WireFraming { .webSocket }

    func write(_ framed: ByteBuffer) { written.append(framed) }

    func flush() { onFlush?() }

    func writeAndFlush(_ framed: ByteBuffer) -> EventLoopFuture<Void> {
        write(framed)
        flush()
        return loop.makeSucceededVoidFuture()
    }

    func close(for reason: EndReason) { closedFor = reason }

    /// The server messages written so far, decoded as a client would.
    func messages() throws -> [ServerMessage] {
        try written.map { frame in
            let payload = try #require(WireFrameTests.decode(frame)).payload
            return try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(payload.readableBytesView))
        }
    }

    func seqs() throws -> [Int64] {
        try messages().compactMap { if case .event(let event) = $0 { event.seq } else { nil } }
    }
}

/// A hub over an in-memory store, with subscribers on one real event loop.
struct HubHarness {
    let store: CartStore
    let hub: FanoutHub
    let loop: any EventLoop

    init(
        _ settings: FanoutHub.Settings = .init(), loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(),
        store: CartStore? = nil
    ) throws {
        self.store = try store ?? CartStore.inMemory()
        var logger = Logger(label: "hub-test")
        logger.logLevel = .critical
        hub = FanoutHub(store: self.store, latestSeq: 0, settings: settings, logger: logger)
        self.store.observers.add(hub)
        self.loop = loop
    }

    /// Connects a subscriber, subscribes it, and waits until it is live.
    func live(carts: Set<String>? = nil, since: Int64 = 0) async throws -> (Subscriber, RecordingTransport) {
        let (subscriber, transport) = try await connect()
        try await loop.submit { subscriber.subscribe(carts: carts, since: since) }.get()
        try await eventually("live") { try await onLoop { subscriber.phase == .live } }
        return (subscriber, transport)
    }

    func connect() async throws -> (Subscriber, RecordingTransport) {
        try await loop.submit {
            let transport = RecordingTransport(loop: loop)
            let subscriber = Subscriber(loop: loop, hub: hub, transport: transport, grant: .operator)
            hub.connect(subscriber)
            return (subscriber, transport)
        }.get()
    }

    func onLoop<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await loop.submit(body).get()
    }

    func add(_ cart: String = "c", sku: String) async throws {
        try await store.addItem(cartID: cart, sku: sku, quantity: 1, unitPriceCents: 1)
    }
}

@Suite("Fan-out hub")
struct HubTests {
    @Test func aSubscriberThatDoesNotReadIsDroppedAndNobodyWaitsForIt() async throws {
        let harness = try HubHarness(.init(ringCapacity: 8))
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
        let harness = try HubHarness(.init(maxSubscribers: 1))
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

    @Test func aSubscriberCatchesUpFromTheLogThenTheRingUnderConcurrentWriters() async throws {
        // A small ring and small pages: the catch-up must read several pages while the ring moves.
        let harness = try HubHarness(.init(ringCapacity: 16, catchUpPageSize: 7))
        for index in 0..<100 { try await harness.add(sku: "s\(index)") }
        let writers = Task { try await writeConcurrently(to: harness.store, writers: 4, perWriter: 50) }
        let (subscriber, transport) = try await harness.live(since: 30)
        try await writers.value
        try await eventually("everything after 30") { try await harness.onLoop { try transport.seqs().last == 300 } }
        #expect(try await harness.onLoop { try transport.seqs() } == Array(31...300), "no gap, no duplicate")
        #expect(try await harness.onLoop { subscriber.cursor } == 300)
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
        let harness = try HubHarness(.init(ringCapacity: 1), store: try CartStore(path: path))
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

@Suite("Leases")
struct LeaseTests {
    @Test func aLeaseLapsesOnlyAfterTheTTLWithoutASignOfLife() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(1)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: .operator)
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .milliseconds(900))
        subscriber.renewLease()
        loop.advanceTime(by: .milliseconds(900))
        #expect(transport.closedFor == nil, "heard 900 ms ago")
        loop.advanceTime(by: .milliseconds(99))
        #expect(transport.closedFor == nil)
        loop.advanceTime(by: .milliseconds(1))
        #expect(transport.closedFor == .leaseExpired)
        #expect(harness.hub.stats.expiries == 1)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func heartbeatingSubscribersKeepTheirLeasesAndOneThatStopsExpiresOnTime() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(1)), loop: loop)
        let transports = (0..<20).map { _ in RecordingTransport(loop: loop) }
        let subscribers = transports.map { Subscriber(loop: loop, hub: harness.hub, transport: $0, grant: .operator) }
        for subscriber in subscribers { harness.hub.connect(subscriber) }
        // Ten seconds of heartbeats every 100 ms; the last subscriber stops after 5 s.
        for tick in 1...100 {
            loop.advanceTime(by: .milliseconds(100))
            for subscriber in subscribers.dropLast() { subscriber.renewLease() }
            if tick <= 50 { subscribers.last?.renewLease() }
            // It lapses one TTL after its last heartbeat, not before, and not at a later sweep.
            #expect((transports.last?.closedFor == .leaseExpired) == (tick >= 60), "at \(tick * 100) ms")
        }
        #expect(harness.hub.stats.subscribers == 19)
        #expect(transports.dropLast().allSatisfy { $0.closedFor == nil })
    }
}

@Suite("Token expiry")
struct TokenExpiryTests {
    static func grant(_ subject: String = "alice", carts: Set<String> = ["alice"], expiresIn seconds: TimeInterval) -> Grant {
        Grant(subject: subject, carts: .only(carts), mayRead: true, mayWrite: false, expiresAt: Date().addingTimeInterval(seconds))
    }

    @Test func aSubscriberEndsWhenItsTokenExpiresAndIsCountedSo() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(60)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: Self.grant(expiresIn: 2))
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .milliseconds(1_900))
        #expect(transport.closedFor == nil)
        loop.advanceTime(by: .milliseconds(200))
        #expect(transport.closedFor == .tokenExpired)
        #expect(harness.hub.stats.ended["tokenExpired"] == 1)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func aRefreshForTheSameSubjectMovesTheDeadline() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(60)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: Self.grant(expiresIn: 2))
        harness.hub.connect(subscriber)
        // Someone else's token is refused (one that does not cover the subscription's carts
        // too: `SignedTokenStreamTests`).
        #expect(subscriber.refresh(with: Self.grant("bob", expiresIn: 60))?.code == .invalidToken)
        #expect(subscriber.refresh(with: Self.grant(carts: ["alice", "alice-wishlist"], expiresIn: 10)) == nil)
        loop.advanceTime(by: .seconds(5))
        #expect(transport.closedFor == nil, "refreshed until 10 s")
        loop.advanceTime(by: .seconds(6))
        #expect(transport.closedFor == .tokenExpired)
    }

    @Test func theOperatorsCredentialNeverExpires() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(3_600 * 48)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: .operator)
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .hours(47))
        #expect(transport.closedFor == nil)
        #expect(subscriber.refresh(with: Self.grant(expiresIn: 60))?.code == .invalidToken)
    }
}

/// The live fan-out of one loop, with the test deciding when a connection has room.
@Suite("Live fan-out")
struct LiveFanoutTests {
    /// Commits an event as the store would announce it.
    static func commit(_ harness: HubHarness, seq: Int64, cart: String = "c") {
        let event = CartEvent(seq: seq, cartID: cart, change: .cartCleared, version: seq, committedAt: Date())
        harness.hub.cartStore(harness.store, didCommit: event)
    }

    /// What was written since the last call, once the loop has run its passes.
    static func written(_ harness: HubHarness, _ transport: RecordingTransport) async throws -> [Int64] {
        try await harness.onLoop {
            defer { transport.written.removeAll() }
            return try transport.seqs()
        }
    }

    static func setWritable(_ writable: Bool, _ harness: HubHarness, _ transport: RecordingTransport) async throws {
        try await harness.onLoop {
            transport.isWritable = writable
            if writable { harness.hub.fanout(for: harness.loop).drained() }
        }
    }

    @Test func aFullConnectionIsSkippedAndCarriesOnWhenItDrains() async throws {
        let harness = try HubHarness(.init(ringCapacity: 100))
        let (_, transport) = try await harness.live(carts: ["c"])
        Self.commit(harness, seq: 1)
        #expect(try await Self.written(harness, transport) == [1])
        try await Self.setWritable(false, harness, transport)
        for seq in Int64(2)...6 { Self.commit(harness, seq: seq, cart: seq == 4 ? "other" : "c") }
        #expect(try await Self.written(harness, transport) == [], "nothing is written while the connection is full")
        // No later event: draining alone must bring the rest, in order, without the other cart.
        try await Self.setWritable(true, harness, transport)
        #expect(try await Self.written(harness, transport) == [2, 3, 5, 6])
        #expect(harness.hub.stats.liveSubscribers == 1)
        #expect(harness.hub.stats.slowConsumerDrops == 0)
    }

    @Test func aConnectionThatClosesWhileItIsFlushedLeavesTheFanOut() async throws {
        let harness = try HubHarness()
        let (subscriber, transport) = try await harness.live()
        try await harness.onLoop { transport.onFlush = { subscriber.end(.peerClosed) } }
        Self.commit(harness, seq: 1)
        try await eventually("ended") { try await harness.onLoop { subscriber.isEnded } }
        #expect(harness.hub.stats.liveSubscribers == 0)
        Self.commit(harness, seq: 2)  // a pass with nobody left
        #expect(try await Self.written(harness, transport) == [1])
        #expect(harness.hub.stats.ended["peerClosed"] == 1)
    }

    @Test func aSubscriberThatFallsOutOfTheRingIsDroppedAsTooSlow() async throws {
        let harness = try HubHarness(.init(ringCapacity: 4))
        let (_, transport) = try await harness.live()
        try await Self.setWritable(false, harness, transport)
        for seq in Int64(1)...4 { Self.commit(harness, seq: seq) }
        #expect(try await harness.onLoop { transport.closedFor } == nil, "4 behind is within the limit")
        Self.commit(harness, seq: 5)
        try await eventually("dropped") { try await harness.onLoop { transport.closedFor == .tooSlow } }
        #expect(harness.hub.stats.slowConsumerDrops == 1)
        #expect(harness.hub.stats.liveSubscribers == 0)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func aStuckSubscriberDoesNotMakeEveryPassReadItsBacklog() async throws {
        // A lease far longer than the test: under a full run's load its 200 passes took over
        // the default 15 s once, and the stuck subscriber's lease lapsed.
        let harness = try HubHarness(.init(leaseTTL: .seconds(600), ringCapacity: 1_000))
        let (_, stuck) = try await harness.live()
        let (_, reader) = try await harness.live()
        try await Self.setWritable(false, harness, stuck)
        var received: [Int64] = []
        for seq in Int64(1)...200 {
            Self.commit(harness, seq: seq)
            // Each pass reaches the reader (on a loaded machine the pass may come after the
            // first look): every event once, in order, while the stuck one holds its backlog.
            try await eventually("event \(seq) written to the reader") {
                received += try await Self.written(harness, reader)
                return received.last == seq
            }
        }
        #expect(received == Array(1...200))
        #expect(try await harness.onLoop { stuck.closedFor } == nil)
    }

    @Test func heartbeatsGoOnlyToSubscribersThatHaveEverythingTheyAnnounce() async throws {
        let harness = try HubHarness()
        let (_, current) = try await harness.live()
        let (_, behind) = try await harness.live()
        try await Self.setWritable(false, harness, behind)
        Self.commit(harness, seq: 1)
        _ = try await Self.written(harness, current)
        try await harness.onLoop { behind.isWritable = true }  // room again, but not yet drained
        harness.hub.heartbeat()
        let heard = try await harness.onLoop { (try current.messages(), try behind.messages()) }
        #expect(heard.0 == [.heartbeat(latestSeq: 1)])
        // Its pass comes first: the event, then the heartbeat that says it has it.
        #expect(heard.1 == [try #require(heard.1.first), .heartbeat(latestSeq: 1)])
        if case .event(let event) = heard.1.first { #expect(event.seq == 1) } else { Issue.record("the event first") }
    }

    @Test func theRingHoldsNoGapAndNoEventTwice() {
        func bytes(_ seq: Int64) -> EventBytes {
            EventBytes(CartEvent(seq: seq, cartID: "c", change: .cartCleared, version: seq, committedAt: Date()))
        }
        // The hub read the newest seq (2), then 3 reached it; 4 was delivered before it listened.
        let ring = LiveRing(capacity: 8, latestSeq: 2)
        #expect(!ring.append(bytes(2)), "committed before the ring started")
        #expect(ring.append(bytes(3)))
        #expect(ring.append(bytes(5)))
        #expect(ring.items(after: 0).map(\.seq) == [5], "4 never came: what came before it is forgotten")
        #expect(!ring.covers(3), "a reader at 3 must read 4 from the log")
        #expect(ring.covers(4))
        #expect(ring.newestSeq == 5)
    }

    @Test func aLiveSubscriberIsNotSkippedPastAnEventTheRingNeverGot() async throws {
        let harness = try HubHarness()
        let (_, transport) = try await harness.live()
        Self.commit(harness, seq: 1)
        #expect(try await Self.written(harness, transport) == [1])
        Self.commit(harness, seq: 3)
        // Ended, so that it resumes from the log with since=1 and gets 2 there.
        try await eventually("ended") { try await harness.onLoop { transport.closedFor == .tooSlow } }
        #expect(try await Self.written(harness, transport) == [])
    }
}

@Suite("Wire frames")
struct WireFrameTests {
    /// Decodes a server frame's header as a client would (RFC 6455 §5.2).
    static func decode(_ frame: ByteBuffer) -> (opcodeByte: UInt8, masked: Bool, payload: ByteBuffer)? {
        var frame = frame
        guard let first = frame.readInteger(as: UInt8.self), let second = frame.readInteger(as: UInt8.self) else { return nil }
        var length = Int(second & 0x7F)
        if length == 126 {
            guard let extended = frame.readInteger(as: UInt16.self) else { return nil }
            length = Int(extended)
        } else if length == 127 {
            guard let extended = frame.readInteger(as: UInt64.self) else { return nil }
            length = Int(extended)
        }
        guard let payload = frame.readSlice(length: length), frame.readableBytes == 0 else { return nil }
        return (first, second & 0x80 != 0, payload)
    }

    @Test(arguments: [0, 125, 126, 300, 65_535, 65_536, 200_000])
    func textFramesCarryTheirPayloadWithTheRightLengthEncoding(length: Int) throws {
        let payload = ByteBuffer(repeating: UInt8(ascii: "x"), count: length)
        let decoded = try #require(Self.decode(WebSocketFrames.text(payload)))
        #expect(decoded.opcodeByte == 0x81, "FIN + text")
        #expect(!decoded.masked, "servers do not mask")
        #expect(decoded.payload == payload)
    }
}

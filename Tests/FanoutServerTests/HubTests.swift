import CartStore
import Foundation
import Logging
import NIOCore
import Testing
@testable import FanoutServer

@Suite("Fan-out hub")
struct HubTests {
    static func hub(_ store: CartStore) -> FanoutHub {
        var logger = Logger(label: "hub-test")
        logger.logLevel = .critical
        let hub = FanoutHub(latestSeq: 0, logger: logger)
        store.observers.add(hub)
        return hub
    }

    /// Takes what is queued without waiting.
    static func drain(_ outbox: Outbox) async -> [OutboxItem] {
        var items: [OutboxItem] = []
        while outbox.count > 0, case .item(let item) = await outbox.next() { items.append(item) }
        return items
    }

    @Test func aSubscriberThatDoesNotReadIsDroppedAndNobodyWaitsForIt() async throws {
        let store = try CartStore.inMemory()
        let hub = Self.hub(store)
        let stuck = Subscriber(id: "stuck", outboxLimit: 8)
        let reader = Subscriber(id: "reader", outboxLimit: 8)
        try hub.connect(stuck, maxConnections: 10)
        try hub.connect(reader, maxConnections: 10)
        hub.subscribe(stuck, carts: nil, since: 0)
        hub.subscribe(reader, carts: nil, since: 0)
        var seen: [Int64] = []
        // 50 commits while `stuck` never reads: every one returns, `reader` gets them all.
        for index in 0..<50 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
            for item in await Self.drain(reader.outbox) {
                if case .frame(let frame) = item, let seq = frame.seq { seen.append(seq) }
            }
        }
        #expect(seen == Array(1...50))
        #expect(stuck.outbox.closedReason == .tooSlow)
        guard case .closed(.tooSlow) = await stuck.outbox.next() else {
            Issue.record("the stuck subscriber's writer must learn it is too slow"); return
        }
        #expect(hub.stats.slowConsumerDrops == 1)
        #expect(hub.stats.subscribers == 1)
        #expect(hub.deliveredCount(seq: 50) == 1)
    }

    @Test func eventsAreEncodedOnceAndSharedByEverySubscriber() async throws {
        let store = try CartStore.inMemory()
        let hub = Self.hub(store)
        let subscribers = (0..<3).map { Subscriber(id: "s\($0)", outboxLimit: 8) }
        for subscriber in subscribers {
            try hub.connect(subscriber, maxConnections: 10)
            hub.subscribe(subscriber, carts: nil, since: 0)
            _ = await subscriber.outbox.next()  // the .start item
        }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        var frames: [OutboundFrame] = []
        for subscriber in subscribers {
            if case .item(.frame(let frame)) = await subscriber.outbox.next() { frames.append(frame) }
        }
        #expect(frames.count == 3)
        // Same storage, not equal copies.
        let addresses = frames.map { frame in frame.text.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) } }
        #expect(Set(addresses).count == 1)
    }

    @Test func connectionsAreCappedAndRefusedWhileShuttingDown() throws {
        let hub = FanoutHub(latestSeq: 0, logger: Logger(label: "hub-test"))
        try hub.connect(Subscriber(id: "a", outboxLimit: 1), maxConnections: 1)
        #expect(throws: FanoutHub.ConnectRefusal.full) { try hub.connect(Subscriber(id: "b", outboxLimit: 1), maxConnections: 1) }
        hub.shutDown()
        #expect(hub.stats.subscribers == 0)
        #expect(throws: FanoutHub.ConnectRefusal.shuttingDown) { try hub.connect(Subscriber(id: "c", outboxLimit: 1), maxConnections: 5) }
    }

    @Test func leasesLapseOnlyAfterTheTTL() throws {
        let hub = FanoutHub(latestSeq: 0, logger: Logger(label: "hub-test"))
        let start = ContinuousClock.now
        let subscriber = Subscriber(id: "a", outboxLimit: 1, now: start)
        try hub.connect(subscriber, maxConnections: 5)
        #expect(hub.expireLeases(ttl: .seconds(1), now: start + .milliseconds(900)) == 0)
        subscriber.heard(at: start + .milliseconds(900))
        #expect(hub.expireLeases(ttl: .seconds(1), now: start + .milliseconds(1_500)) == 0)
        #expect(hub.expireLeases(ttl: .seconds(1), now: start + .milliseconds(2_000)) == 1)
        #expect(subscriber.outbox.closedReason == .leaseExpired)
        #expect(hub.stats.expiries == 1)
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
        let decoded = try #require(Self.decode(WireWriter.textFrame(payload)))
        #expect(decoded.opcodeByte == 0x81, "FIN + text")
        #expect(!decoded.masked, "servers do not mask")
        #expect(decoded.payload == payload)
    }
}

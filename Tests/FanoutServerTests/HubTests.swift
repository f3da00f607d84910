import CartStore
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Synchronization
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
        let toldToClose = Mutex<CloseReason?>(nil)
        stuck.outbox.onClose { reason in toldToClose.withLock { $0 = reason } }
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
        #expect(toldToClose.withLock { $0 } == .tooSlow, "its connection must be told to close")
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

/// A live subscriber on an `EmbeddedChannel`: the test decides when its connection has room
/// and runs its event loop by hand.
@Suite("Live fan-out")
struct LiveFanoutTests {
    struct Live {
        let hub: FanoutHub
        let subscriber: Subscriber
        let channel: EmbeddedChannel
        let store: CartStore

        /// - Parameter closesOnFlush: the connection closes while it is being flushed, as a socket
        ///   does when the peer has reset it.
        init(lagLimit: Int, carts: Set<String>? = nil, closesOnFlush: Bool = false) async throws {
            store = try CartStore.inMemory()
            var logger = Logger(label: "hub-test")
            logger.logLevel = .critical
            hub = FanoutHub(latestSeq: 0, lagLimit: lagLimit, logger: logger)
            let subscriber = Subscriber(id: "s", outboxLimit: 8)
            self.subscriber = subscriber
            channel = EmbeddedChannel()
            if closesOnFlush { try channel.pipeline.syncOperations.addHandler(ClosesOnFlush()) }
            // As `SubscriberHandler` does: a closed connection closes the outbox and leaves the hub.
            let hub = hub
            try channel.pipeline.syncOperations.addHandler(OnInactive {
                subscriber.outbox.close(.connectionEnded)
                hub.disconnect(subscriber)
            })
            try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
            try hub.connect(subscriber, maxConnections: 1)
            hub.subscribe(subscriber, carts: carts, since: 0)
            _ = await subscriber.outbox.next()  // the .start item: the history is empty
            let wentLive = hub.goLive(subscriber)
            #expect(wentLive)
            let fanout = hub.fanout(for: channel.eventLoop)
            subscriber.outbox.onClose { _ in fanout.remove(subscriber) }
            let wire = WireWriter.make(for: channel, onWritable: fanout.writabilityChanged)
            channel.embeddedEventLoop.run()
            fanout.add(subscriber, wire: try await wire.get(), carts: carts, after: 0)
            channel.embeddedEventLoop.run()
        }

        /// Commits an event as the store would announce it, and runs the loop.
        func commit(seq: Int64, cart: String = "c") {
            let event = CartEvent(seq: seq, cartID: cart, change: .cartCleared, version: seq, committedAt: Date())
            hub.cartStore(store, didCommit: event)
            channel.embeddedEventLoop.run()
        }

        /// The seqs of the frames written to the connection since the last call.
        func written() throws -> [Int64] {
            var seqs: [Int64] = []
            while let frame = try channel.readOutbound(as: ByteBuffer.self) {
                let payload = try #require(WireFrameTests.decode(frame)).payload
                if case .event(let event) = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(payload.readableBytesView)) {
                    seqs.append(event.seq)
                }
            }
            return seqs
        }

        func setWritable(_ writable: Bool) {
            channel.isWritable = writable
            channel.pipeline.fireChannelWritabilityChanged()
            channel.embeddedEventLoop.run()
        }
    }

    @Test func aFullConnectionIsSkippedAndCarriesOnWhenItDrains() async throws {
        let live = try await Live(lagLimit: 100, carts: ["c"])
        live.commit(seq: 1)
        #expect(try live.written() == [1])
        live.setWritable(false)
        for seq in Int64(2)...6 { live.commit(seq: seq, cart: seq == 4 ? "other" : "c") }
        #expect(try live.written() == [], "nothing is written while the connection is full")
        // No later event: draining alone must bring the rest, in order, without the other cart.
        live.setWritable(true)
        #expect(try live.written() == [2, 3, 5, 6])
        #expect(live.hub.stats.liveSubscribers == 1)
        #expect(live.hub.stats.slowConsumerDrops == 0)
    }

    @Test func aConnectionThatClosesWhileItIsFlushedLeavesTheFanOut() async throws {
        let live = try await Live(lagLimit: 100, closesOnFlush: true)
        live.commit(seq: 1)
        #expect(live.subscriber.outbox.closedReason == .connectionEnded)
        #expect(live.hub.stats.liveSubscribers == 0)
        live.commit(seq: 2)  // a pass with nobody left
        #expect(live.hub.stats.liveSubscribers == 0)
    }

    @Test func aSubscriberThatFallsOutOfTheRingIsDroppedAsTooSlow() async throws {
        let live = try await Live(lagLimit: 4)
        live.setWritable(false)
        for seq in Int64(1)...4 { live.commit(seq: seq) }
        #expect(live.subscriber.outbox.closedReason == nil, "4 behind is within the limit")
        live.commit(seq: 5)
        #expect(live.subscriber.outbox.closedReason == .tooSlow)
        #expect(live.hub.stats.slowConsumerDrops == 1)
        #expect(live.hub.stats.liveSubscribers == 0)
        #expect(live.hub.stats.subscribers == 0)
    }
}

/// Closes the channel when it is flushed.
final class ClosesOnFlush: ChannelOutboundHandler, Sendable {
    typealias OutboundIn = NIOAny

    func flush(context: ChannelHandlerContext) {
        context.close(promise: nil)
    }
}

/// Calls `action` when the channel goes inactive.
final class OnInactive: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    let action: @Sendable () -> Void

    init(_ action: @escaping @Sendable () -> Void) {
        self.action = action
    }

    func channelInactive(context: ChannelHandlerContext) {
        action()
        context.fireChannelInactive()
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

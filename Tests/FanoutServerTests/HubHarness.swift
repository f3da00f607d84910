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
///
/// Its subscribers send no heartbeats: unless a test of leases sets its own, their lease is
/// `HubHarness.lease`, which a loaded machine never outlasts (the default 15 s lapsed in a full
/// run while a test of slow consumers was still committing).
struct HubHarness {
    static let lease: TimeAmount = .seconds(600)

    let store: CartStore
    let hub: FanoutHub
    let loop: any EventLoop

    init(
        _ settings: FanoutHub.Settings = .init(leaseTTL: lease), loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(),
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

    func connect(grant: Grant = .operator) async throws -> (Subscriber, RecordingTransport) {
        try await loop.submit {
            let transport = RecordingTransport(loop: loop)
            let subscriber = Subscriber(loop: loop, hub: hub, transport: transport, grant: grant)
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

import CartStore
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceLifecycle

/// The server, built from a configuration and an open store: what `fanout-server` runs and
/// what the tests run with port 0.
struct FanoutServerApp: Sendable {
    let application: Application<RouterResponder<FanoutRequestContext>>
    let hub: FanoutHub
    let store: CartStore
    let logger: Logger

    /// Runs until SIGTERM/SIGINT: then subscribers are closed with 1001 first, and the HTTP
    /// server stops accepting and finishes in-flight requests.
    func run() async throws {
        let group = ServiceGroup(configuration: .init(
            services: [application, SubscriberShutdown(hub: hub)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        try await group.run()
    }
}

/// Builds the application: routes, WebSocket upgrade, the hub as a store observer, and the
/// lease reaper as a service.
///
/// - Parameter onServerRunning: called with the bound port once the server listens.
func buildApplication(
    configuration: ServerConfiguration,
    store: CartStore,
    logger: Logger,
    onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws -> FanoutServerApp {
    let hub = FanoutHub(latestSeq: try await store.latestSeq(), lagLimit: configuration.outboxLimit, logger: logger)
    store.observers.add(hub)
    let access = AccessPolicy(token: configuration.token, allowedOrigins: configuration.allowedOrigins)

    let router = Router(context: FanoutRequestContext.self)
    router.middlewares.add(ErrorMiddleware())
    router.middlewares.add(AccessMiddleware(policy: access))
    CartController(store: store, hub: hub).addRoutes(to: router.group("carts"))
    EventsController(store: store, hub: hub).addRoutes(to: router)

    let webSocketRouter = Router(context: SubscriberRequestContext.self)
    webSocketRouter.middlewares.add(ErrorMiddleware())
    SubscribeController(store: store, hub: hub, configuration: configuration, access: access)
        .addRoutes(to: webSocketRouter)

    // No WebSocket auto-ping: the protocol's own heartbeats and leases find dead subscribers,
    // and the ping loop would be one more task per connection.
    let channelConfiguration = HTTP1WebSocketUpgradeChannel.Configuration(ws: .init(
        maxFrameSize: configuration.maxMessageSize,
        autoPing: .disabled))
    let webSocketResponder = webSocketRouter.buildResponder()
    let application = Application(
        router: router,
        server: HTTPServerBuilder { responder in
            SmallReadBufferChannel(base: HTTP1WebSocketUpgradeChannel(
                responder: responder, webSocketResponder: webSocketResponder, configuration: channelConfiguration))
        },
        configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "fanout"),
        services: [LeaseReaper(hub: hub, leaseTTL: configuration.leaseTTL, heartbeatInterval: configuration.heartbeatInterval)],
        onServerRunning: { channel in
            await onServerRunning(channel.localAddress?.port ?? configuration.port)
        },
        logger: logger)
    return FanoutServerApp(application: application, hub: hub, store: store, logger: logger)
}

/// The HTTP and WebSocket connections, with a smaller first receive buffer than NIO's default.
///
/// Every NIO channel keeps its receive buffer for reuse between reads, sized by its receive
/// allocator: 2 KiB at first by default. An idle subscriber only ever sends heartbeats of a
/// few dozen bytes, so with thousands of them those buffers are a sizeable part of the
/// server's memory. The adaptive allocator still grows the buffer for a connection whose reads
/// fill it (a large request body), up to NIO's usual 64 KiB.
struct SmallReadBufferChannel: ServerChildChannel {
    let base: HTTP1WebSocketUpgradeChannel

    static let receiveAllocator = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1WebSocketUpgradeChannel.Value> {
        do {
            // The initializer runs on the channel's event loop, before its first read.
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveAllocator)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return base.setup(channel: channel, logger: logger)
    }

    func handle(value: HTTP1WebSocketUpgradeChannel.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

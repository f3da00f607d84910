import CartStore
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ProcessSignals
import ServiceLifecycle

/// The server, built from a configuration and an open store: what `fanout-server` runs and
/// what the tests run with port 0.
struct FanoutServerApp: Sendable {
    let application: Application<RouterResponder<FanoutRequestContext>>
    let hub: FanoutHub
    let store: CartStore
    let logger: Logger
    /// What `GET /metrics` exports.
    let metrics: ServerMetrics

    /// Runs until SIGTERM/SIGINT: then the HTTP server stops accepting, subscribers end with
    /// 1001, and in-flight requests finish (see `HubService`).
    ///
    /// The signals are watched by `SignalWatch` rather than the service group's own, which on
    /// Linux can miss a signal the kernel hands to a thread other than its dispatch source's.
    func run() async throws {
        let group = ServiceGroup(configuration: .init(services: [application], logger: logger))
        let logger = self.logger
        let hub = self.hub
        let shutdown = NIOLockedValueBox<(at: ContinuousClock.Instant, subscribers: Int)?>(nil)
        let signals = try SignalWatch([SIGTERM, SIGINT]) { signal in
            shutdown.withLockedValue { $0 = $0 ?? (.now, hub.subscriberCount) }
            logger.info(
                "signal received; shutting down",
                metadata: ["fanout.signal": "\(signal == SIGTERM ? "SIGTERM" : "SIGINT")", "fanout.subscribers": "\(hub.subscriberCount)"])
            Task { await group.triggerGracefulShutdown() }
        }
        defer { withExtendedLifetime(signals) {} }
        try await group.run()
        if let (at, subscribers) = shutdown.withLockedValue({ $0 }) {
            let took = at.duration(to: .now)
            logger.info(
                "shutdown done",
                metadata: [
                    "fanout.subscribers_closed": "\(subscribers)",
                    "fanout.took_ms": "\(took.milliseconds)",
                ])
        }
    }
}

/// Builds the application: routes, the `/subscribe` WebSocket upgrade (`FanoutChannel`), and
/// the hub as a store observer, with its service.
///
/// - Parameters:
///   - storeService: what keeps the store working, when it needs something run (a
///     `PostgresCartStore`): first in the server's service group, so that it starts before, and
///     stops after, everything that uses the store.
///   - onServerRunning: called with the bound port once the server listens.
func buildApplication(
    configuration: ServerConfiguration,
    store: CartStore,
    storeService: (any Service)? = nil,
    presenceSharing: (any PresenceSharing & Service)? = nil,
    logger: Logger,
    eventLoopGroup: EventLoopGroupProvider = .singleton,
    onServerRunning: @escaping @Sendable (Int) async -> Void = { _ in }
) async throws -> FanoutServerApp {
    let metrics = ServerMetrics()
    let hub = FanoutHub(
        // Where the store's deliveries stand, not a query: on PostgreSQL the pool runs only
        // once the service group does.
        store: store, latestSeq: try await store.deliveredSeq(),
        settings: .init(
            leaseTTL: .nanoseconds(Int64(configuration.leaseTTL.seconds * 1e9)),
            ringCapacity: configuration.ringSize,
            maxSubscribers: configuration.maxSubscribers,
            presence: .init(maxMembers: configuration.presenceMaxMembers, maxMembersPerUser: configuration.presenceMaxMembersPerUser)),
        presenceSharing: presenceSharing, logger: logger)
    store.observers.add(hub)
    presenceSharing?.attach(hub.presence)
    var tokenKeys: TokenKeys?
    if configuration.jwtSecret != nil || configuration.jwtKey != nil {
        tokenKeys = try await TokenKeys(secret: configuration.jwtSecret, keyFile: configuration.jwtKey, audience: configuration.jwtAudience)
    }
    let access = AccessPolicy(token: configuration.token, tokenKeys: tokenKeys, allowedOrigins: configuration.allowedOrigins)

    let health = StoreHealth(store: store)
    // The store's condition, logged at each change (database lost and back, disk full).
    let watch = StoreWatch(store: store, health: health, logger: logger)
    let refusals = Refusals(metrics: metrics.requests, logger: logger, watch: watch)
    let router = Router(context: FanoutRequestContext.self)
    let hosts = HostPolicy(listeningOn: configuration.host, allowedHosts: configuration.allowedHosts)
    // Outermost, so it sees each answer as the client gets it (after ErrorMiddleware).
    router.middlewares.add(RequestMetricsMiddleware(metrics: metrics.requests, watch: watch))
    router.middlewares.add(CrossOriginMiddleware(allowedOrigins: configuration.allowedOrigins))
    router.middlewares.add(ErrorMiddleware())
    router.middlewares.add(HostMiddleware(policy: hosts))
    // Before any route's own middleware: a path spelled any other way than the one way is
    // refused whatever the credential, so what a path reaches never depends on its spelling.
    router.middlewares.add(CanonicalPathMiddleware())
    router.middlewares.add(OriginMiddleware(policy: access))
    // Access is declared with each route: the group it is added to asks for its credential.
    let groups = AccessGroups(router: router, policy: access)
    CartController(store: store, hub: hub).addRoutes(to: groups.users.group("carts"))
    EventsController(store: store, hub: hub).addRoutes(to: groups.users)
    StatusController(hub: hub, health: health).addRoutes(open: groups.open, operators: groups.operators)
    MetricsController(metrics: metrics, hub: hub).addRoutes(to: groups.operators)
    OpenAPIController().addRoutes(to: groups.open)
    PageController().addRoutes(to: groups.open)
    // `/subscribe`: a connection whose first request is a WebSocket upgrade or asks for an event
    // stream is taken over before the router (`FanoutChannel`), to be driven by its event loop
    // with no task per subscriber; a later request on a kept-alive connection asking for either
    // is redirected to a new connection (`FanoutChannel.redirectingUpgrades`). What reaches this
    // route asked for neither: 406.
    groups.users.get(RouterPath(SubscribeEndpoint.path)) { _, _ -> Response in throw SubscribeEndpoint.notAcceptable }
    // Last, so it wraps only the not-found answer: 405 and `Allow` for a known path.
    router.add(
        middleware: MethodNotAllowedMiddleware(
            routes: router.routes.map { ($0.path, $0.method) }))

    let subscribe = SubscribeEndpoint(
        hub: hub, configuration: configuration, hosts: hosts, access: access, refusals: refusals)
    let channels = HTTPServerBuilder { responder in FanoutChannel(responder: responder, subscribe: subscribe) }
    let application = Application(
        router: router,
        server: try configuration.tls.map { try .tls(channels, tlsConfiguration: $0) } ?? channels,
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: "fanout",
            availableConnectionsDelegate: configuration.maxConnections.map { MaximumAvailableConnections($0, logger: logger) }),
        // The store's (PostgreSQL's pool and follower) first.
        services: [storeService, presenceSharing].compactMap { $0 } + [
            HubService(hub: hub, heartbeatInterval: configuration.heartbeatInterval),
            watch,
            IdempotencyKeyPruner(
                store: store, timeToLive: configuration.idempotencyKeysTTL, maxKeys: configuration.idempotencyKeysMax, logger: logger,
                kept: metrics.idempotencyKeys),
        ],
        onServerRunning: { channel in
            await onServerRunning(channel.localAddress?.port ?? configuration.port)
        },
        eventLoopGroupProvider: eventLoopGroup,
        logger: logger)
    return FanoutServerApp(application: application, hub: hub, store: store, logger: logger, metrics: metrics)
}

import EventLoopExecutor
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket

/// The server's connections: HTTP/1 through Hummingbird's router, and `/subscribe` as a
/// WebSocket (`WebSocketTransport`) or an event stream (`ServerSentEventsTransport`) that the
/// event loop drives, with no task per connection.
///
/// Modelled on HummingbirdWebSocket's `HTTP1WebSocketUpgradeChannel`, whose `handle` runs the
/// WebSocket handler in the connection's task for the connection's lifetime. Here the upgrade
/// request is checked on the event loop, the upgrade installs NIO's frame decoder and encoder
/// and a `WebSocketTransport`, and `handle` returns as soon as the upgrade is done: Hummingbird's
/// server does not close a channel when its `handle` returns, and its graceful shutdown still
/// waits for every channel to close (a subscriber ends as shutting down on quiescing).
struct FanoutChannel: ServerChildChannel, HTTPChannelHandler {
    /// What the first request of a connection turned it into.
    enum Negotiated: Sendable {
        /// Plain HTTP, for the router.
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// An upgrade the checks refused: answered with the error, then closed.
        case refusedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, APIError)
        /// A subscriber: its transport has the connection.
        case subscriber
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    /// Every NIO channel keeps its receive buffer for reuse between reads, sized by its receive
    /// allocator: 2 KiB at first by default. An idle subscriber only ever sends heartbeats of a
    /// few dozen bytes, so with thousands of them those buffers are a sizeable part of the
    /// server's memory. The adaptive allocator still grows the buffer for a connection whose
    /// reads fill it (a large request body), up to NIO's usual 64 KiB.
    static let receiveAllocator = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)

    let responder: HTTPChannelHandler.Responder
    let subscribe: SubscribeEndpoint
    let http1: HTTP1Channel.Configuration

    init(responder: @escaping HTTPChannelHandler.Responder, subscribe: SubscribeEndpoint) {
        self.responder = Self.servingHeadAsGet(Self.redirectingUpgrades(responder))
        self.subscribe = subscribe
        self.http1 = HTTP1Channel.Configuration(idleTimeout: subscribe.configuration.idleTimeout.timeAmount)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // The initializer runs on the channel's event loop, before its first read.
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveAllocator)
            let subscribe = subscribe
            /// Why the upgrade was refused, for the HTTP answer.
            let refusal = NIOLoopBoundBox<APIError?>(nil, eventLoop: channel.eventLoop)
            /// What the upgrade request's credential allows, once admitted.
            let admitted = NIOLoopBoundBox<Grant?>(nil, eventLoop: channel.eventLoop)
            let lineGuard = NIOLoopBound(RequestLineGuard(), eventLoop: channel.eventLoop)
            let requestGuard = NIOLoopBound(
                RequestGuard(
                    bodyTimeout: subscribe.configuration.bodyTimeout.timeAmount, lineGuard: lineGuard.value,
                    refused: { error in subscribe.refusals.record(error, method: "-", route: "(the request could not be read)") }),
                eventLoop: channel.eventLoop)
            let upgrader = NIOTypedWebSocketServerUpgrader<Negotiated>(
                maxFrameSize: subscribe.configuration.maxMessageSize,
                // `WebSocketTransport` answers bad frames itself: an error message, then the close.
                enableAutomaticErrorHandling: false,
                shouldUpgrade: { channel, head in
                    let admission: EventLoopFuture<Grant>
                    do {
                        admission = subscribe.admit(try Self.request(head, subscribe: subscribe), on: channel.eventLoop)
                    } catch {
                        admission = channel.eventLoop.makeFailedFuture(error)
                    }
                    return admission.map { grant -> HTTPHeaders? in
                        admitted.value = grant
                        return HTTPHeaders()
                    }.recover { error in
                        refusal.value = error as? APIError ?? .malformed("not a valid WebSocket upgrade request")
                        return nil
                    }
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        let maxSize = subscribe.configuration.maxMessageSize
                        channel.pipeline.syncOperations.removeHandler(requestGuard.value, promise: nil)
                        channel.pipeline.syncOperations.removeHandler(lineGuard.value, promise: nil)
                        try channel.pipeline.syncOperations.addHandlers(
                            MaskedFramesOnly(),
                            // Joins fragmented messages, within the same size limit as one frame
                            // and at most `maxFragments` fragments. Any fragment may be empty
                            // (RFC 6455 §5.4): the count, not a least size, bounds them.
                            NIOWebSocketFrameAggregator(
                                minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: WebSocketTransport.maxFragments,
                                maxAccumulatedFrameSize: maxSize),
                            WebSocketTransport(endpoint: subscribe, grant: admitted.value ?? .nothing, logger: logger))
                        return .subscriber
                    }
                })
            let upgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    var stream: EventLoopFuture<EventStreamAdmission?> = channel.eventLoop.makeSucceededFuture(nil)
                    if refusal.value == nil, let head = requestGuard.value.firstRequest, ServerSentEvents.isStreamRequest(head) {
                        stream = EventStreamAdmission.admit(head, subscribe: subscribe, on: channel.eventLoop).map { $0 }.recover { error in
                            refusal.value = error as? APIError ?? .malformed("not a valid event stream request")
                            return nil
                        }
                    }
                    return stream.flatMapThrowing { admission in
                        let operations = channel.pipeline.syncOperations
                        if let admission {
                            try Self.startEventStream(
                                admission, on: channel, subscribe: subscribe, requestGuard: requestGuard.value, logger: logger)
                            return .subscriber
                        }
                        try operations.addHandler(HTTP1ToHTTPServerCodec(secure: subscribe.configuration.tls != nil))
                        try operations.addHandlers(http1.additionalChannelHandlers())
                        try operations.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: http1.idleTimeout.map { .init($0) }, logger: logger))
                        let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true))
                        if let error = refusal.value { return .refusedUpgrade(http, error) }
                        return .http(http)
                    }
                })
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Negotiated>(upgradeConfiguration: upgradeConfiguration)
            configuration.enablePipelining = false  // HTTP is pipelined by NIOAsyncChannel
            configuration.enableErrorHandling = false  // Hummingbird handles errors
            configuration.enableResponseHeaderValidation = false  // Swift HTTP Types already validate
            configuration.decoderConfiguration.maxHeaderFieldSize = http1.httpDecoder.maxHeaderFieldSize
            configuration.decoderConfiguration.maxHeaderListSize = http1.httpDecoder.maxHeaderListSize
            configuration.decoderConfiguration.maxHeaderFieldCount = http1.httpDecoder.maxHeaderFieldCount
            let operations = channel.pipeline.syncOperations
            let negotiated = try operations.configureUpgradableHTTPServerPipeline(configuration: configuration)
            let decoder = try operations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try operations.addHandler(requestGuard.value, position: .after(decoder))
            // Before the decoder, reading the request's bytes as it would: after TLS, if any.
            try operations.addHandler(
                lineGuard.value, position: .before(operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self).handler))
            // A connection must send its first request head in time: idle or trickling
            // connections cannot pile up and hold the server's descriptors.
            let deadline = channel.eventLoop.scheduleTask(in: subscribe.configuration.firstRequestTimeout.timeAmount) {
                channel.close(promise: nil)
            }
            negotiated.whenComplete { _ in deadline.cancel() }
            return Value(negotiated: negotiated, channel: channel)
        }
    }

    /// A request for an event stream, admitted: what its credential allows, what it subscribes
    /// to, and the browser origin to allow in its answer.
    struct EventStreamAdmission: Sendable {
        let grant: Grant
        let subscription: ServerSentEvents.Subscription
        let allowedOrigin: String?

        /// The admission of a stream request, on `loop`; fails with the `APIError` to answer
        /// instead of the stream.
        static func admit(_ head: HTTPRequestHead, subscribe: SubscribeEndpoint, on loop: any EventLoop) -> EventLoopFuture<Self> {
            let request: Request
            do {
                request = try FanoutChannel.request(head, subscribe: subscribe)
            } catch {
                return loop.makeFailedFuture(error)
            }
            return subscribe.admit(request, on: loop).flatMapThrowing { grant in
                let subscription = try ServerSentEvents.subscription(of: request, endpoint: subscribe, grant: grant)
                // A cart full of members: 409 before the stream, not a stream that ends at once
                // (a browser's EventSource would open it again every second).
                if let presence = subscription.presence, let carts = subscription.carts,
                    let refusal = subscribe.hub.presence.refusal(joining: carts, user: grant.subject, key: presence.key)
                {
                    throw APIError(refusal)
                }
                return Self(
                    grant: grant, subscription: subscription,
                    allowedOrigin: request.headers[.origin].flatMap { subscribe.access.allowedOrigins.contains($0) ? $0 : nil })
            }
        }
    }

    /// Hands the connection of an admitted event stream to its transport, without the HTTP
    /// handlers (it writes its own response head, and reads only to see the client close,
    /// dropping whatever else arrives).
    private static func startEventStream(
        _ admission: EventStreamAdmission, on channel: any Channel, subscribe: SubscribeEndpoint, requestGuard: RequestGuard,
        logger: Logger
    ) throws {
        let operations = channel.pipeline.syncOperations
        operations.removeHandler(requestGuard, promise: nil)
        operations.removeHandler(requestGuard.lineGuard, promise: nil)
        try operations.removeHandler(context: operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self), promise: nil)
        try operations.removeHandler(context: operations.context(handlerType: HTTPResponseEncoder.self), promise: nil)
        try operations.addHandler(
            ServerSentEventsTransport(
                endpoint: subscribe, subscription: admission.subscription, grant: admission.grant,
                allowedOrigin: admission.allowedOrigin, logger: logger))
    }

    /// The `/subscribe` request of a connection's first head, as Hummingbird's routes see one
    /// (its scheme `https` when the server speaks TLS).
    static func request(_ head: HTTPRequestHead, subscribe: SubscribeEndpoint) throws -> Request {
        Request(
            head: try HTTPRequest(head, secure: subscribe.configuration.tls != nil, splitCookie: false), body: .init(buffer: ByteBuffer()))
    }

    /// Serves HTTP for the connection's lifetime, on its event loop (`EventLoopTaskExecutor`);
    /// for a subscriber, returns once upgraded.
    func handle(value: Value, logger: Logger) async {
        await withTaskExecutorPreference(EventLoopTaskExecutor(value.channel.eventLoop)) {
            await serve(value, logger: logger)
        }
    }

    private func serve(_ value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http(let http):
                await handleHTTP(asyncChannel: http, logger: logger)
            case .refusedUpgrade(let http, let error):
                subscribe.refusals.record(error, method: "GET", route: SubscribeEndpoint.path)
                await refuse(http, with: error, logger: logger)
            case .subscriber:
                break
            }
        } catch let error as ChannelError where error == .inputClosed {
            logger.trace("connection closed before its first request")
        } catch {
            logger.debug("connection setup failed", metadata: ["error": "\(error)"])
        }
    }

    /// Answers a refused upgrade with its JSON error, and closes the connection.
    private func refuse(_ http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, with error: APIError, logger: Logger) async {
        do {
            let body = try error.body()
            try await http.executeThenClose { _, outbound in
                var head = HTTPResponse(
                    status: error.status,
                    headerFields: [
                        .connection: "close",
                        .contentType: APIError.contentType,
                        .contentLength: "\(body.readableBytes)",
                    ])
                if let challenge = error.wwwAuthenticate { head.headerFields[.wwwAuthenticate] = challenge }
                try await outbound.write(contentsOf: [.head(head), .body(body), .end(nil)])
            }
        } catch {
            logger.trace("could not answer a refused upgrade", metadata: ["error": "\(error)"])
        }
    }

    /// HEAD is answered wherever GET is, as GET: NIO's response encoder, which saw the request's
    /// method, sends the head and drops the body.
    static func servingHeadAsGet(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        { request, responseWriter, channel in
            guard request.method == .head else { return try await responder(request, responseWriter, channel) }
            var head = request.head
            head.method = .get
            try await responder(Request(head: head, body: request.body), responseWriter, channel)
        }
    }

    /// NIO upgrades only a connection's first request, and only a first request becomes an
    /// event stream. A later one asking for a WebSocket or a stream is redirected to the same
    /// URL with the connection closed, so that the client retries on a new connection (as
    /// `HTTP1WebSocketUpgradeChannel` does; an `EventSource` follows redirects too).
    static func redirectingUpgrades(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        struct RedirectedUpgrade: Error {}
        return { request, responseWriter, channel in
            guard request.headers[.upgrade]?.lowercased() == "websocket" || ServerSentEvents.isStreamRequest(request) else {
                return try await responder(request, responseWriter, channel)
            }
            var location = request.uri.path
            if let query = request.uri.query { location += "?\(query)" }
            try await responseWriter.writeResponse(
                HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: location]))
            throw RedirectedUpgrade()
        }
    }
}

import FanoutProtocol
import Logging
import NIOCore

/// A `/subscribe` event stream (`Accept: text/event-stream`): the transport of one
/// `Subscriber`, driven by its event loop with no task per connection, like the WebSocket's.
///
/// `FanoutChannel` hands it the connection once the request is admitted, with the HTTP
/// handlers taken out: it writes the response head itself, then the events, framed by
/// `ServerSentEvents` (shared with every other stream), until the subscriber ends. The body
/// ends with the connection (`Connection: close`), so the bytes of an event are the same for
/// every stream, with no chunk framing around them.
///
/// The client never speaks again: the connection is read only to see it close (its FIN or a
/// reset ends the subscriber at once, `peerClosed`), and whatever bytes it sends are dropped as
/// they arrive, never held. So its lease is renewed by the stream draining: whenever the
/// connection takes more bytes (its unsent bytes are under the high-water mark) after a write.
/// A stream whose client stopped reading stays full, and ends at the lease's end
/// (`leaseExpired`), or sooner if it falls out of the live ring (`tooSlow`). Either way the
/// browser reconnects by itself with `Last-Event-ID` and gets the rest from the log.
///
/// Bytes the kernel holds count as not delivered: the socket's send buffer is fixed at
/// `sendBufferSize` (the kernel would otherwise grow it to megabytes, which a stalled stream
/// with little traffic takes minutes to fill, and which 2 000 stalled streams hold as kernel
/// memory). Past it, the only bytes the server cannot see are those in the client's own
/// receive buffer, which its kernel acknowledged.
final class ServerSentEventsTransport: ChannelInboundHandler, SubscriberTransport {
    /// Whatever arrives after the request (nothing, from a browser) is dropped unread.
    typealias InboundIn = Never

    private let endpoint: SubscribeEndpoint
    private let subscription: ServerSentEvents.Subscription
    /// What the request's credential allows.
    private let grant: Grant
    /// The browser origin to name in `Access-Control-Allow-Origin`, when it is an allowed one.
    private let allowedOrigin: String?
    private let logger: Logger
    private let connection: SubscriberConnection
    private var subscriber: Subscriber? { connection.subscriber }
    private var channel: (any Channel)?
    private var closed = false

    init(
        endpoint: SubscribeEndpoint, subscription: ServerSentEvents.Subscription, grant: Grant, allowedOrigin: String?, logger: Logger
    ) {
        self.endpoint = endpoint
        self.subscription = subscription
        self.grant = grant
        self.allowedOrigin = allowedOrigin
        self.logger = logger
        connection = SubscriberConnection(hub: endpoint.hub, configuration: endpoint.configuration)
    }

    // MARK: SubscriberTransport

    var framing: WireFraming { .serverSentEvents }

    var isWritable: Bool { channel?.isWritable ?? false }

    func write(_ framed: ByteBuffer) {
        guard !closed else { return }
        channel?.write(framed, promise: nil)
    }

    func flush() {
        channel?.flush()
        renewLeaseIfDrained()
    }

    func writeAndFlush(_ framed: ByteBuffer) -> EventLoopFuture<Void> {
        guard let channel else { preconditionFailure("written to before it was added") }
        guard !closed else { return channel.eventLoop.makeFailedFuture(ChannelError.outputClosed) }
        let written = channel.writeAndFlush(framed)
        // The future completes on this loop, where the transport lives.
        let transport = NIOLoopBound(self, eventLoop: channel.eventLoop)
        written.whenSuccess { transport.value.renewLeaseIfDrained() }
        return written
    }

    func close(for reason: EndReason) {
        guard !closed, let channel else { return }
        let error = reason.error(resume: "Last-Event-ID")
        // The error event only if it fits: a stream that ends because its client stopped
        // reading has no room for it, and waiting for room would hold the connection open.
        if let error, channel.isWritable {
            channel.write(ServerSentEvents.frame(ServerEncoding.message(.error(error))), promise: nil)
        }
        closed = true
        channel.close(after: channel.writeAndFlush(ByteBuffer()), within: Self.drainTimeout)
    }

    /// The socket's send buffer (`SO_SNDBUF`; Linux doubles it for its own bookkeeping).
    static let sendBufferSize: SocketOptionValue = 64 * 1024

    /// How long an ending stream's last bytes may take to leave before the connection is
    /// closed with them unsent.
    static let drainTimeout = TimeAmount.seconds(5)

    // MARK: Events

    /// Added once the request is admitted, on an active channel: answers it, registers the
    /// subscriber, welcomes it and subscribes it.
    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        self.channel = channel
        guard channel.isActive else { return }
        try? channel.syncOptions?.setOption(ChannelOptions.socketOption(.so_sndbuf), value: Self.sendBufferSize)
        channel.write(responseHead(), promise: nil)
        guard let welcome = connection.open(channel, for: self, grant: grant) else { return }
        write(WireFraming.serverSentEvents.frame(ServerEncoding.message(welcome)))
        flush()
        do throws(FanoutError) {
            try subscriber?.subscribe(carts: subscription.carts, since: subscription.since, presence: subscription.presence)
        } catch {
            // Presence full since the request was admitted (or all carts): said as the stream's
            // error, and the stream ends.
            write(WireFraming.serverSentEvents.frame(ServerEncoding.message(.error(error))))
            subscriber?.end(.peerClosed)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            renewLeaseIfDrained()
            connection.drained()
        }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if !connection.handle(event, on: context.channel) { context.fireUserInboundEventTriggered(event) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("event stream connection error", metadata: ["fanout.error": "\(error)"])
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        connection.closed()
        context.fireChannelInactive()
    }

    // MARK: Writing

    private func renewLeaseIfDrained() {
        if channel?.isWritable == true { subscriber?.renewLease() }
    }

    /// The response head, and the stream's first line: how soon a browser reconnects.
    private func responseHead() -> ByteBuffer {
        var head = "HTTP/1.1 200 OK\r\n"
        head += "Content-Type: text/event-stream; charset=utf-8\r\n"
        head += "Cache-Control: no-store\r\n"
        head += "Connection: close\r\n"
        // Tells a buffering reverse proxy (nginx) to pass events on as they come.
        head += "X-Accel-Buffering: no\r\n"
        if let allowedOrigin {
            head += "Access-Control-Allow-Origin: \(allowedOrigin)\r\nVary: Origin\r\n"
        }
        head += "\r\nretry: \(ServerSentEvents.reconnectDelayMilliseconds)\n\n"
        return ByteBuffer(string: head)
    }
}

import CartStore
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// One `/subscribe` connection after the upgrade, driven by its event loop: it sends the
/// welcome, answers the client's messages (every one renews the lease), pings and close
/// handshake, and closes the connection when the subscriber's outbox closes (lease expired,
/// too slow, shutdown).
///
/// No task waits on the connection. An idle subscriber used to keep a task whose async stack,
/// kept at its deepest (the task allocator frees slabs only when the task ends), cost more
/// than the rest of the connection; now it is this handler, its pipeline and its hub entries.
/// Only the snapshot or backlog is sent by a task, which the first valid `subscribe` starts and
/// which ends once the subscriber is live (`SubscribeController.startWriter`).
///
/// The frames come from NIO's `WebSocketFrameDecoder` and `NIOWebSocketFrameAggregator`: whole
/// messages of at most `maxMessageSize` bytes, and control frames. Every method runs on the
/// channel's event loop.
final class SubscriberHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The heartbeat as the fanout clients send it.
    private static let plainHeartbeat = Array(#"{"type":"heartbeat"}"#.utf8)

    /// How long a close handshake the server started waits for the client's close frame.
    static let closeTimeout = TimeAmount.seconds(15)

    private enum State {
        case open
        /// A close frame was sent; the channel closes on the client's close frame, or at the
        /// timeout.
        case closing(Scheduled<Void>?)
        case closed
    }

    private let controller: SubscribeController
    private let logger: Logger
    private var state = State.open
    /// Nil until connected to the hub, and when the hub refused the connection.
    private var subscriber: Subscriber?
    private var subscribed = false

    private var hub: FanoutHub { controller.hub }

    init(controller: SubscribeController, logger: Logger) {
        self.controller = controller
        self.logger = logger
    }

    // MARK: Events

    /// Added by the upgrade, on an active channel: registers the subscriber and welcomes it.
    func handlerAdded(context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        // Live frames are written by the event loop's fan-out, which skips a connection while
        // more than this many bytes wait unsent in it (and drops it once it falls out of the
        // ring): bounded memory per connection however slowly its client reads.
        try? context.channel.syncOptions?.setOption(ChannelOptions.writeBufferWaterMark, value: .init(low: 16 * 1024, high: 64 * 1024))
        let configuration = controller.configuration
        let subscriber = Subscriber(id: SubscribeController.newID(), outboxLimit: configuration.outboxLimit)
        do {
            try hub.connect(subscriber, maxConnections: configuration.maxSubscribers)
        } catch {
            if error == .full {
                startClosing(context: context, code: .init(codeNumber: Int(FanoutCloseCode.serverFull.rawValue)), reason: "server full")
            } else {
                startClosing(context: context, code: .goingAway, reason: "server shutting down")
            }
            return
        }
        self.subscriber = subscriber
        // The outbox closes from the hub (the store's writer thread, the lease reaper, the
        // fan-out): the close frame is written on this loop. The closure holds this handler
        // until the outbox closes, at the latest when the channel goes inactive.
        let fanout = hub.fanout(for: context.eventLoop)
        let connection = SubscriberConnection(handler: self, context: context)
        subscriber.outbox.onClose { reason in
            fanout.remove(subscriber)
            guard reason != .connectionEnded else { return }
            connection.eventLoop.execute { connection.closeForOutbox(reason) }
        }
        logger.debug("subscriber connected", metadata: ["fanout.subscriber.id": "\(subscriber.id)"])
        send(.welcome(.init(
            subscriberID: subscriber.id,
            heartbeatInterval: configuration.heartbeatInterval.seconds,
            leaseTTL: configuration.leaseTTL.seconds,
            latestSeq: hub.latestSeq)), context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch state {
        case .open:
            break
        case .closing:
            // The close handshake: the client's close frame ends the connection; anything else
            // is ignored.
            if frame.opcode == .connectionClose { context.close(promise: nil) }
            return
        case .closed:
            return
        }
        guard frame.reservedBits.isEmpty else {
            // No extension was negotiated.
            return fail(context: context, code: .protocolError)
        }
        switch frame.opcode {
        case .text, .binary:
            received(frame.opcode, frame.unmaskedData, context: context)
        case .ping:
            // The decoder refuses fragmented and long control frames.
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .pong:
            break
        case .connectionClose:
            receivedClose(frame, context: context)
        default:
            fail(context: context, code: .protocolError)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // The HTTP server is shutting down (normally `SubscriberShutdown` closed us first).
            startClosing(context: context, code: .goingAway, reason: "server shutting down")
        } else if let event = event as? ChannelEvent, event == .inputClosed {
            // The client half-closed: it will send nothing more, not even a close frame.
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? NIOWebSocketError {
            // From the frame decoder, which reads nothing more: say why, and close at once.
            let code: WebSocketErrorCode = error == .invalidFrameLength ? .messageTooLarge : .protocolError
            fail(context: context, code: code, closeNow: true)
        } else if let error = error as? NIOWebSocketFrameAggregator.Error {
            let code: WebSocketErrorCode = error == .accumulatedFrameSizeIsTooLarge ? .messageTooLarge : .protocolError
            fail(context: context, code: code, closeNow: true)
        } else {
            logger.debug("subscriber connection error", metadata: ["error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .closing(let timeout) = state { timeout?.cancel() }
        state = .closed
        if let subscriber {
            // Closing the outbox stops a writer task still running and releases `onClose`.
            subscriber.outbox.close(.connectionEnded)
            hub.disconnect(subscriber)
            logger.debug("subscriber disconnected", metadata: ["fanout.subscriber.id": "\(subscriber.id)"])
        }
        context.fireChannelInactive()
    }

    // MARK: Messages

    /// A whole message from the client.
    private func received(_ opcode: WebSocketOpcode, _ data: ByteBuffer, context: ChannelHandlerContext) {
        guard let subscriber else { return }
        subscriber.heard()
        guard opcode == .text else {
            sendError("binary_not_supported", "send JSON text frames, not binary", context: context)
            startClosing(context: context, code: .policyViolation, reason: "binary frames are not supported")
            return
        }
        // Most messages are this exact heartbeat: skip the JSON decoder (on the event loop).
        if data.readableBytesView.elementsEqual(Self.plainHeartbeat) { return }
        let message: ClientMessage
        do {
            message = try FanoutJSON.decoder().decode(ClientMessage.self, from: Data(data.readableBytesView))
        } catch {
            sendError("bad_message", "expected {\"type\":\"subscribe\"|\"heartbeat\",…}: \(SubscribeController.describe(error))", context: context)
            return
        }
        switch message {
        case .heartbeat:
            break
        case .subscribe(let carts, let since):
            if subscribed {
                sendError("already_subscribed", "this connection is already subscribed; open another to change the carts", context: context)
                return
            }
            if let problem = controller.validate(carts: carts, since: since) {
                sendError(problem.code, problem.message, context: context)
                return
            }
            subscribed = true
            hub.subscribe(subscriber, carts: carts.map(Set.init), since: since)
            controller.startWriter(for: subscriber, connection: SubscriberConnection(handler: self, context: context), logger: logger)
        }
    }

    /// The client's close frame, while open: answer it (RFC 6455 §5.5.1) and close.
    private func receivedClose(_ frame: WebSocketFrame, context: ChannelHandlerContext) {
        var data = frame.unmaskedData
        let size = data.readableBytes
        let code = data.readWebSocketErrorCode()
        // As WSCore answers: 1000, unless the code is not one a peer may send.
        var answer = WebSocketErrorCode.normalClosure
        if size > 0 {
            switch code {
            case nil:
                answer = .protocolError
            case .unknown(let number) where number < 3000 || number > 4999:
                answer = .protocolError
            default:
                break
            }
        }
        startClosing(context: context, code: answer, reason: nil, closeNow: true)
    }

    // MARK: Writing

    private func send(_ message: ServerMessage, context: ChannelHandlerContext) {
        context.writeAndFlush(wrapOutboundOut(SubscribeController.textFrame(ServerEncoding.encode(message))), promise: nil)
    }

    private func sendError(_ code: String, _ message: String, context: ChannelHandlerContext) {
        send(.error(code: code, message: message), context: context)
    }

    /// The writer task's frames: written while the connection is open, refused after its close
    /// frame.
    fileprivate func write(_ text: ByteBuffer, context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        guard case .open = state else { return context.eventLoop.makeFailedFuture(ChannelError.outputClosed) }
        return context.writeAndFlush(wrapOutboundOut(SubscribeController.textFrame(text)))
    }

    // MARK: Closing

    /// The outbox closed: close with the code documented for `reason`.
    fileprivate func closeForOutbox(_ reason: CloseReason, context: ChannelHandlerContext) {
        switch reason {
        case .leaseExpired:
            startClosing(context: context, code: .init(codeNumber: Int(FanoutCloseCode.leaseExpired.rawValue)), reason: "lease expired: heartbeat more often")
        case .tooSlow:
            startClosing(context: context, code: .init(codeNumber: Int(FanoutCloseCode.tooSlow.rawValue)), reason: "too slow: reconnect and resume with since")
        case .shuttingDown:
            startClosing(context: context, code: .goingAway, reason: "server shutting down")
        case .connectionEnded:
            break
        }
    }

    /// The client broke the WebSocket rules or the size limit: tell it, and close with `code`
    /// (1002 or 1009).
    private func fail(context: ChannelHandlerContext, code: WebSocketErrorCode, closeNow: Bool = false) {
        guard case .open = state else { return }
        sendError("bad_frame", "the last frame broke the WebSocket rules or the \(controller.configuration.maxMessageSize)-byte limit", context: context)
        startClosing(context: context, code: code, reason: nil, closeNow: closeNow)
    }

    /// Sends the close frame, after which nothing else is written: the subscriber leaves the
    /// hub and the live fan-out first, and the writer task's next write fails.
    ///
    /// - Parameter closeNow: close the channel once the frame is out instead of waiting for
    ///   the client's close frame (when answering one, or when the input cannot be read).
    private func startClosing(context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String?, closeNow: Bool = false) {
        guard case .open = state else { return }
        if let subscriber {
            // At once, as we are on its loop: no live frame can follow the close frame.
            hub.fanout(for: context.eventLoop).remove(subscriber)
            // Stops a writer task; no-ops when the hub's `drop` (which closed the outbox) is why
            // we close.
            subscriber.outbox.close(.connectionEnded)
            hub.disconnect(subscriber)
        }
        var data = context.channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        data.write(webSocketErrorCode: code)
        if let reason { data.writeString(reason) }
        let written = context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)))
        let boundContext = context.loopBound
        if closeNow {
            state = .closing(nil)
            written.whenComplete { _ in boundContext.value.close(promise: nil) }
        } else {
            state = .closing(context.eventLoop.scheduleTask(in: Self.closeTimeout) {
                boundContext.value.close(promise: nil)
            })
        }
    }
}

/// A subscriber's connection, for use off its event loop: by the writer task, and by the
/// outbox's `onClose`.
struct SubscriberConnection: Sendable {
    let channel: any Channel
    private let handler: NIOLoopBound<SubscriberHandler>
    private let context: NIOLoopBound<ChannelHandlerContext>

    init(handler: SubscriberHandler, context: ChannelHandlerContext) {
        self.channel = context.channel
        self.handler = NIOLoopBound(handler, eventLoop: context.eventLoop)
        self.context = context.loopBound
    }

    var eventLoop: any EventLoop { context.eventLoop }

    /// Writes a text frame and flushes it; fails once the connection sent its close frame.
    func write(_ text: ByteBuffer) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { handler.value.write(text, context: context.value) }
    }

    /// On the event loop: the outbox closed for `reason`.
    func closeForOutbox(_ reason: CloseReason) {
        handler.value.closeForOutbox(reason, context: context.value)
    }
}

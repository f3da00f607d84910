import CartStore
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// A `/subscribe` WebSocket after the upgrade: the transport of one `Subscriber`, driven by its
/// event loop with no task per connection.
///
/// It reads the client's messages (each of the protocol's renews the lease), turns `subscribe`
/// into `Subscriber.subscribe`, answers pings and the close handshake, and writes what the hub
/// gives it below NIO's frame encoder (`WebSocketFrames`). Endings go through `Subscriber.end`;
/// this transport's part is `close(for:)`, which says the reason with its close code, once.
///
/// What it owes a client that does not read is bounded: one pong, and `maxAnswersOwed` bytes of
/// answers (error messages) beyond the connection's high-water mark; an answer past those ends
/// the subscriber as too slow.
///
/// The frames come from NIO's `WebSocketFrameDecoder` and `NIOWebSocketFrameAggregator`: whole
/// messages of at most `maxMessageSize` bytes in at most `maxFragments` frames (RFC 6455 lets
/// any of them be empty), and control frames.
final class WebSocketTransport: ChannelInboundHandler, SubscriberTransport {
    typealias InboundIn = WebSocketFrame

    /// The heartbeat as the fanout clients send it.
    private static let plainHeartbeat = Array(#"{"type":"heartbeat"}"#.utf8)

    /// The most frames one message may arrive in (`NIOWebSocketFrameAggregator`), empty ones
    /// included: the bound on a message's pieces, as `maxMessageSize` is on its bytes.
    static let maxFragments = 1_024

    /// The most bytes of answers (error messages) written while the connection has no room,
    /// since it last drained: about a hundred `bad_message` errors. The answer past them ends
    /// the subscriber as too slow (4001): a client that sends and never reads cannot make the
    /// server hold its answers without end.
    static let maxAnswersOwed = 16 * 1_024

    /// How long a close handshake the server started waits for the client's close frame.
    static let closeTimeout = TimeAmount.seconds(15)

    private enum State {
        case open
        /// A close frame was sent; the channel closes on the client's close frame, or is reset at
        /// the timeout (`Channel.reset`).
        case closing(Scheduled<Void>?)
        case closed
    }

    private let endpoint: SubscribeEndpoint
    /// What the upgrade request's credential allows.
    private let grant: Grant
    private let logger: Logger
    private var state = State.open
    private let connection: SubscriberConnection
    private var subscriber: Subscriber? { connection.subscriber }
    /// Where framed bytes are written: the context of NIO's frame encoder, below it.
    private var wire: ChannelHandlerContext?
    private var channel: (any Channel)?
    /// The answer to the newest ping that arrived while the connection had no room: sent when it
    /// drains. Older ones are skipped, as RFC 6455 §5.5.3 allows, so a ping flood from a client
    /// that does not read costs one pong, not one per ping.
    private var pendingPong: ByteBuffer?
    /// Bytes of answers written while the connection had no room, since it last drained: at
    /// most `maxAnswersOwed`.
    private var answersOwed = 0
    /// The client sent its close frame: answer with a close frame, nothing else.
    private var answeringClose = false
    /// `refresh` tokens not yet verified, oldest first: the first is being verified (one at a
    /// time per connection, in the order sent), at most `maxRefreshesWaiting` more wait.
    private var refreshes: [String] = []
    static let maxRefreshesWaiting = 4

    init(endpoint: SubscribeEndpoint, grant: Grant, logger: Logger) {
        self.endpoint = endpoint
        self.grant = grant
        self.logger = logger
        connection = SubscriberConnection(hub: endpoint.hub, configuration: endpoint.configuration)
    }

    // MARK: SubscriberTransport

    var framing: WireFraming { .webSocket }

    var isWritable: Bool { channel?.isWritable ?? false }

    func write(_ framed: ByteBuffer) {
        wire?.write(NIOAny(framed), promise: nil)
    }

    func flush() {
        wire?.flush()
    }

    func writeAndFlush(_ framed: ByteBuffer) -> EventLoopFuture<Void> {
        guard case .open = state, let wire else {
            return channel!.eventLoop.makeFailedFuture(ChannelError.outputClosed)
        }
        return wire.writeAndFlush(NIOAny(framed))
    }

    func close(for reason: EndReason) {
        switch reason {
        case .peerClosed:
            // The client's close frame is answered (RFC 6455 §5.5.1); a vanished one is not.
            startClosing(code: .normalClosure, reason: nil, closeNow: true)
        case .violation(let violation):
            let (code, error): (WebSocketErrorCode, FanoutError) =
                switch violation {
                case .malformedFrame: (.protocolError, FanoutError(.badFrame, "the last frame broke the WebSocket rules"))
                case .messageTooLarge:
                    (
                        .messageTooLarge,
                        FanoutError(
                            .badFrame,
                            "messages are limited to \(endpoint.configuration.maxMessageSize) bytes in at most \(Self.maxFragments) fragments"
                        )
                    )
                case .binaryMessage: (.policyViolation, FanoutError(.binaryNotSupported, "send JSON text frames, not binary"))
                case .invalidText: (.dataInconsistentWithMessage, FanoutError(.badFrame, "text frames must be valid UTF-8"))
                }
            // Within what a client that does not read may be owed; the close code says it anyway.
            if !answeringClose { _ = write(answer: .error(error)) }
            startClosing(code: code, reason: nil, closeNow: true)
        case .leaseExpired, .tooSlow, .serverFull, .shuttingDown, .failed, .tokenExpired:
            guard let error = reason.error(resume: "since"), let code = error.code.closeCode else { return }
            // The close frame's reason says it (123 bytes at most); a store failure is worth an
            // error message too.
            if reason == .failed { _ = write(answer: .error(error)) }
            startClosing(code: .init(codeNumber: code), reason: String(error.message.utf8.prefix(123)) ?? error.code.rawValue)
        }
    }

    // MARK: Events

    /// Added by the upgrade, on an active channel: registers the subscriber and welcomes it.
    func handlerAdded(context: ChannelHandlerContext) {
        channel = context.channel
        guard context.channel.isActive else { return }
        wire = try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)
        if let welcome = connection.open(context.channel, for: self, grant: grant) { _ = write(answer: welcome) }
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
        guard let subscriber else { return }
        guard frame.reservedBits.isEmpty else {
            // No extension was negotiated.
            return subscriber.end(.violation(.malformedFrame))
        }
        switch frame.opcode {
        case .text:
            received(frame.unmaskedData, from: subscriber)
        case .binary:
            subscriber.renewLease()
            subscriber.end(.violation(.binaryMessage))
        case .ping:
            // The decoder refuses fragmented and long control frames.
            pong(frame.unmaskedData)
        case .pong:
            break
        case .connectionClose:
            receivedClose(frame, from: subscriber)
        default:
            subscriber.end(.violation(.malformedFrame))
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            answersOwed = 0
            if let pong = pendingPong {
                pendingPong = nil
                write(pong)
                flush()
            }
            connection.drained()
        }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Quiescing, and the client's FIN (it sends nothing more, not even a close frame), are the
        // connection's to handle.
        if !connection.handle(event, on: context.channel) { context.fireUserInboundEventTriggered(event) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let subscriber else {
            context.close(promise: nil)
            return
        }
        if let error = error as? NIOWebSocketError {
            // From the frame decoder, which reads nothing more.
            subscriber.end(.violation(error == .invalidFrameLength ? .messageTooLarge : .malformedFrame))
        } else if error is UnmaskedFrame {
            subscriber.end(.violation(.malformedFrame))
        } else if let error = error as? NIOWebSocketFrameAggregator.Error {
            // Too many fragments is a message too large too (1009), whatever its byte count.
            let tooLarge = error == .accumulatedFrameSizeIsTooLarge || error == .tooManyFragments
            subscriber.end(.violation(tooLarge ? .messageTooLarge : .malformedFrame))
        } else {
            logger.debug("subscriber connection error", metadata: ["fanout.error": "\(error)"])
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .closing(let timeout) = state { timeout?.cancel() }
        state = .closed
        connection.closed()
        wire = nil
        context.fireChannelInactive()
    }

    // MARK: Messages

    /// A whole text message from the client. A message of the protocol renews the lease, refused
    /// or not; one that is not (`bad_message`) is no sign of life.
    private func received(_ data: ByteBuffer, from subscriber: Subscriber) {
        // Most messages are this exact heartbeat: skip the JSON decoder (on the event loop).
        if data.readableBytesView.elementsEqual(Self.plainHeartbeat) { return subscriber.renewLease() }
        guard String(validating: data.readableBytesView, as: UTF8.self) != nil else {
            return subscriber.end(.violation(.invalidText))
        }
        let message: ClientMessage
        do {
            message = try FanoutJSON.decoder().decode(ClientMessage.self, from: Data(data.readableBytesView))
        } catch let error as FanoutError {
            // A message of the protocol with a value outside its rules (`invalid_since`).
            subscriber.renewLease()
            return answer(.error(error), to: subscriber)
        } catch {
            let problem = FanoutError(
                .badMessage, "expected {\"type\":\"subscribe\"|\"heartbeat\"|\"refresh\"|\"presence\",…}: \(Self.describe(error))")
            return answer(.error(problem), to: subscriber)
        }
        subscriber.renewLease()
        switch message {
        case .heartbeat:
            break
        case .subscribe(let carts, let since, let presence):
            guard subscriber.phase == .connected else {
                let problem = FanoutError(.alreadySubscribed, "this connection is already subscribed; open another to change the carts")
                return answer(.error(problem), to: subscriber)
            }
            if let problem = endpoint.validate(carts: carts, since: since) {
                return answer(.error(problem), to: subscriber)
            }
            do throws(FanoutError) {
                try subscriber.subscribe(carts: try subscriber.grant.readable(carts.map(Set.init)), since: since, presence: presence)
            } catch {
                answer(.error(error), to: subscriber)
            }
        case .presence(let state):
            do throws(FanoutError) {
                try subscriber.changePresence(to: state)
            } catch {
                answer(.error(error), to: subscriber)
            }
        case .refresh(let token):
            refresh(subscriber, with: token)
        }
    }

    /// Queues a fresh token to be verified (in the order sent, one at a time); a refused one is
    /// an error message, and the subscription goes on until the old token's `exp`.
    private func refresh(_ subscriber: Subscriber, with token: String) {
        guard endpoint.access.tokenKeys != nil else {
            return answer(.error(FanoutError(.invalidToken, "this server takes no signed tokens")), to: subscriber)
        }
        guard refreshes.count <= Self.maxRefreshesWaiting else {
            let problem = FanoutError(.badMessage, "too many refreshes waiting to be checked: send one at a time")
            return answer(.error(problem), to: subscriber)
        }
        refreshes.append(token)
        if refreshes.count == 1 { verifyNextRefresh(of: subscriber) }
    }

    /// Verifies the oldest queued token off the loop (jwt-kit's keys are an actor), then hands
    /// it to the subscriber on it, and goes on with the next.
    private func verifyNextRefresh(of subscriber: Subscriber) {
        guard let token = refreshes.first, let keys = endpoint.access.tokenKeys else { return }
        let transport = NIOLoopBound(self, eventLoop: subscriber.loop)
        let loop = subscriber.loop
        Task {
            let verified: Result<Grant, FanoutError>
            do throws(FanoutError) {
                verified = .success(try await keys.grant(for: token))
            } catch {
                verified = .failure(error)
            }
            loop.execute {
                let transport = transport.value
                let problem: FanoutError? =
                    switch verified {
                    case .success(let grant): subscriber.refresh(with: grant)
                    case .failure(let error): error
                    }
                if let problem { transport.answer(.error(problem), to: subscriber) }
                transport.refreshes.removeFirst()
                transport.verifyNextRefresh(of: subscriber)
            }
        }
    }

    /// The client's close frame, while open: answer it and close.
    private func receivedClose(_ frame: WebSocketFrame, from subscriber: Subscriber) {
        var data = frame.unmaskedData
        let size = data.readableBytes
        let code = data.readWebSocketErrorCode()
        answeringClose = true
        // As WSCore answers: 1000, unless the code is not one a peer may send.
        if size > 0 {
            switch code {
            case nil:
                return subscriber.end(.violation(.malformedFrame))
            case .unknown(let number) where number < 3000 || number > 4999:
                return subscriber.end(.violation(.malformedFrame))
            default:
                break
            }
            // The reason, if any, is UTF-8 text (RFC 6455 §5.5.1).
            guard String(validating: data.readableBytesView, as: UTF8.self) != nil else {
                return subscriber.end(.violation(.invalidText))
            }
        }
        subscriber.end(.peerClosed)
    }

    private func pong(_ payload: ByteBuffer) {
        let pong = WebSocketFrames.pong(payload)
        if isWritable {
            write(pong)
            flush()
        } else {
            pendingPong = pong
        }
    }

    // MARK: Writing

    /// Writes a message of the transport's own (the welcome, an error), not the hub's. While
    /// the connection has no room, at most `maxAnswersOwed` bytes of them are queued; returns
    /// false, writing nothing, for one past that.
    private func write(answer message: ServerMessage) -> Bool {
        guard case .open = state else { return true }
        let frame = WebSocketFrames.text(ServerEncoding.encode(message))
        if !isWritable {
            guard answersOwed + frame.readableBytes <= Self.maxAnswersOwed else { return false }
            answersOwed += frame.readableBytes
        }
        write(frame)
        flush()
        return true
    }

    /// Answers a client's message; a client that has stopped reading its answers ends as too
    /// slow, with what it is owed bounded.
    private func answer(_ message: ServerMessage, to subscriber: Subscriber) {
        if !write(answer: message) { subscriber.end(.tooSlow) }
    }

    // MARK: Closing

    /// Sends the close frame, after which nothing else is written.
    ///
    /// - Parameter closeNow: close the channel once the frame is out instead of waiting for
    ///   the client's close frame (when answering one, or when the input cannot be read).
    private func startClosing(code: WebSocketErrorCode, reason: String?, closeNow: Bool = false) {
        guard case .open = state, let wire else { return }
        let channel = wire.channel
        let written = wire.writeAndFlush(NIOAny(WebSocketFrames.close(code: code, reason: reason)))
        if closeNow {
            state = .closing(nil)
            channel.close(after: written, within: Self.closeTimeout)
        } else {
            state = .closing(channel.eventLoop.scheduleTask(in: Self.closeTimeout) { channel.reset() })
        }
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? DecodingError {
            return ErrorMiddleware<FanoutRequestContext>.describe(error)
        }
        return "invalid JSON"
    }
}

/// Refuses frames a client sent unmasked (RFC 6455 §5.1: the server must close the connection),
/// before `NIOWebSocketFrameAggregator` joins fragments and the mask is no longer to be seen.
final class MaskedFramesOnly: ChannelInboundHandler, Sendable {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard unwrapInboundIn(data).maskKey != nil else {
            context.fireErrorCaught(UnmaskedFrame())
            return
        }
        context.fireChannelRead(data)
    }
}

/// A client frame without a mask.
struct UnmaskedFrame: Error {}

import NIOCore
import NIOHTTP1

/// Guards an HTTP connection against requests that would otherwise leave a client hanging.
///
/// - **A request that cannot be parsed** is answered and the connection closed. NIO's HTTP
///   decoder stops reading at the first malformed byte; without this, nobody answered and nobody
///   closed, and the client waited forever (an unknown method, a bad Content-Length, a huge
///   header, an HTTP/2.0 or 0.9 request line, a TLS hello). Modelled on NIO's
///   `HTTPServerProtocolErrorHandler`, but the answer is the API's JSON error with the status
///   that fits. Request targets longer than `maxURILength` get 414.
/// - **A body answered before it was read** (a 413, say) under `Connection: close` is read and
///   dropped, up to `maxDrain` bytes, then the connection closes: a client that sends its whole
///   body before reading (as Python's urllib does) then sees the answer instead of waiting for
///   a server that stopped reading. Without `Connection: close` the HTTP server reads the rest
///   of the body itself before the next request.
/// - **A body that trickles** (a byte every few seconds, which resets no idle timer's
///   patience for long) must have arrived whole `bodyTimeout` after the read that left it
///   incomplete: else 408 `request_timeout`, and the connection closes. A request whole in one
///   read (nearly all) arms no timer. The head has its own deadline (`FanoutChannel`, the first
///   request's; the idle timeout, later ones).
/// - **A request line `RequestLineGuard` refused** is answered here like a parse error.
///
/// Every refusal closes the connection once the answer has left, or 5 s later if the client
/// does not read it (`Channel.close(after:within:)`).
///
/// It sits right after the request decoder; a WebSocket upgrade removes it with the decoder.
final class RequestGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    static let maxURILength = 8 * 1024
    /// The most bytes of an answered request's body read and dropped before closing anyway.
    static let maxDrain = 64 * 1024 * 1024
    /// How long a request's body may take to arrive, from its head: bodies are at most 64 KiB.
    let bodyTimeout: TimeAmount
    /// Closes a connection whose body is still arriving at `bodyTimeout`; armed only when a
    /// read ends with the body incomplete.
    private var bodyDeadline: Scheduled<Void>?
    /// How long a refusal may take to leave before the connection is reset anyway.
    static let refusalTimeout = TimeAmount.seconds(5)

    /// A response has started and not ended: a parse error can then only close.
    private var responding = false
    private var failed = false
    /// The server is shutting down (`ChannelShouldQuiesceEvent`): a body still arriving gets
    /// `quiesceGrace`, not `bodyTimeout`, before the request is refused.
    private var quiescing = false
    /// How long a body still arriving when the server starts shutting down may take: a client
    /// that stopped sending must not hold the shutdown for `bodyTimeout` (30 s).
    static let quiesceGrace = TimeAmount.seconds(1)
    /// The current request's body is still arriving.
    private var readingBody = false
    /// The current request said `Connection: close`.
    private var closeRequested = false
    /// Answered before its body was read: the rest is dropped, then the connection closes.
    private var draining = false
    /// The current request was answered before its body had arrived.
    private var answeredBeforeBody = false
    private var drained = 0
    /// The connection's first request head: `FanoutChannel` looks at it for an event stream.
    private(set) var firstRequest: HTTPRequestHead?

    /// Told when a request has ended, to read the next request line.
    let lineGuard: RequestLineGuard

    /// Told of each refusal, to count and log it.
    let refused: @Sendable (APIError) -> Void

    init(bodyTimeout: TimeAmount, lineGuard: RequestLineGuard, refused: @escaping @Sendable (APIError) -> Void = { _ in }) {
        self.bodyTimeout = bodyTimeout
        self.lineGuard = lineGuard
        self.refused = refused
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            if head.uri.utf8.count > Self.maxURILength {
                return refuse(context: context, with: APIError(.uriTooLong, "request targets are limited to \(Self.maxURILength) bytes"))
            }
            if firstRequest == nil { firstRequest = head }
            readingBody = true
            answeredBeforeBody = false
            closeRequested = !head.isKeepAlive
        case .body(let body):
            if draining {
                drained += body.readableBytes
                if drained > Self.maxDrain { context.close(promise: nil) }
                return
            }
        case .end:
            readingBody = false
            lineGuard.requestEnded()
            bodyDeadline?.cancel()
            bodyDeadline = nil
            if draining {
                context.close(promise: nil)
                return
            }
        }
        context.fireChannelRead(data)
    }

    /// At shutdown: a connection that never sent a request is closed (nothing was asked); one
    /// whose request's body is still arriving gets `quiesceGrace` to finish it, then 503
    /// `shutting_down`. Requests read whole finish as usual (Hummingbird closes the connection
    /// after their answer).
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, !quiescing {
            quiescing = true
            if firstRequest == nil, !readingBody {
                context.close(promise: nil)
                return
            }
            if readingBody, !failed {
                bodyDeadline?.cancel()
                let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                let loopContext = NIOLoopBound(context, eventLoop: context.eventLoop)
                bodyDeadline = context.eventLoop.scheduleTask(in: Self.quiesceGrace) {
                    handler.value.bodyTimedOut(context: loopContext.value)
                }
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        bodyDeadline?.cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        bodyDeadline?.cancel()
        context.fireChannelInactive()
    }

    private func bodyTimedOut(context: ChannelHandlerContext) {
        guard readingBody else { return }
        if draining || responding || answeredBeforeBody {
            // Answered already (or answering): nothing more to say.
            context.close(promise: nil)
        } else if quiescing {
            refuse(context: context, with: APIError(.shuttingDown, "the server is shutting down, and the request's body had not arrived"))
        } else {
            refuse(
                context: context,
                with: APIError(
                    .requestTimeout, "the request's body did not arrive within \(Double(bodyTimeout.nanoseconds) / 1e9) s of its head"))
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if readingBody, bodyDeadline == nil, !failed, !quiescing {
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            let loopContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            bodyDeadline = context.eventLoop.scheduleTask(in: bodyTimeout) {
                handler.value.bodyTimedOut(context: loopContext.value)
            }
        }
        // The HTTP server reads no more once it answered; the body is read here meanwhile.
        if draining { context.read() }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? HTTPParserError {
            refuse(context: context, with: Self.answer(to: error))
        } else if let refused = error as? RequestLineGuard.Refused {
            refuse(context: context, with: refused.answer)
        } else {
            context.fireErrorCaught(error)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status.code >= 200: responding = true
        case .end:
            responding = false
            answeredBeforeBody = readingBody
            if readingBody, closeRequested, !draining {
                draining = true
                context.read()
            }
        default: break
        }
        context.write(data, promise: promise)
    }

    private func refuse(context: ChannelHandlerContext, with error: APIError) {
        guard !failed else { return }
        failed = true
        refused(error)
        guard !responding, let body = try? error.body() else {
            context.close(promise: nil)
            return
        }
        var headers = HTTPHeaders([
            ("Content-Type", APIError.contentType), ("Content-Length", "\(body.readableBytes)"), ("Connection", "close"),
        ])
        if error.status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD, POST, PATCH, DELETE, OPTIONS") }
        let head = HTTPResponseHead(version: .http1_1, status: .init(statusCode: error.status.code), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        context.channel.close(after: context.writeAndFlush(wrapOutboundOut(.end(nil))), within: Self.refusalTimeout)
    }

    /// The status and error that fit a parse error.
    static func answer(to error: HTTPParserError) -> APIError {
        switch error {
        case .headerOverflow:
            APIError(.headersTooLarge, "the request's header is too large")
        case .invalidVersion:
            APIError(.httpVersionNotSupported, "this server speaks HTTP/1.1 (and 1.0)")
        case .invalidMethod:
            APIError(.methodNotAllowed, "unknown method: this server speaks GET, HEAD, POST, PATCH, DELETE and OPTIONS")
        case .invalidContentLength, .unexpectedContentLength:
            APIError(.malformedRequest, "the Content-Length is missing a number, or conflicts with another")
        case .invalidChunkSize:
            APIError(.malformedRequest, "a chunk size is not a hexadecimal number")
        default:
            APIError(.malformedRequest, "not a valid HTTP/1.1 request (\(error))")
        }
    }
}

import NIOCore
import NIOHTTP1

/// Reads a request's first line before NIO's HTTP decoder does, for the two refusals the decoder
/// would word wrongly: a request target longer than `RequestGuard.maxURILength` is 414 however
/// long (the decoder stops at its 80 KiB header limit and says 431), and a request line ending
/// in a bare LF is 400 (the decoder takes it for another HTTP version: 505).
///
/// It looks at a request line only, byte by byte, and passes everything on as it came;
/// `RequestGuard` tells it when a request has ended, so the next line is looked at too. (A
/// second request sent before the first was read, pipelined in the same packet, is left to the
/// decoder.) A WebSocket upgrade or an event stream removes it with the HTTP handlers.
final class RequestLineGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// The longest request line: a method, the longest target, and the version.
    static let maxLineLength = RequestGuard.maxURILength + 64

    private var readingLine = true
    private var lineLength = 0
    private var lastWasCR = false
    private var refused = false

    /// The request ended: the next bytes start a request line.
    func requestEnded() {
        readingLine = true
        lineLength = 0
        lastWasCR = false
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        if readingLine {
            let buffer = unwrapInboundIn(data)
            for byte in buffer.readableBytesView {
                if byte == UInt8(ascii: "\n") {
                    if !lastWasCR {
                        return refuse(context, APIError.malformed("lines of a request end with CRLF, not a bare LF"))
                    }
                    // Empty lines before a request line are allowed (RFC 9112 §2.2).
                    if lineLength > 1 {
                        readingLine = false
                        break
                    }
                    lineLength = 0
                    lastWasCR = false
                    continue
                }
                lineLength += 1
                lastWasCR = byte == UInt8(ascii: "\r")
                if lineLength > Self.maxLineLength {
                    return refuse(context, APIError(.uriTooLong, "request targets are limited to \(RequestGuard.maxURILength) bytes"))
                }
            }
        }
        context.fireChannelRead(data)
    }

    /// Answers with the JSON error, as the HTTP encoder would have written it, and closes. It is
    /// the pipeline's first handler, so what it writes goes to the socket as it is.
    private func refuse(_ context: ChannelHandlerContext, _ error: APIError) {
        refused = true
        let body = (try? error.body()) ?? ByteBuffer()
        let status = HTTPResponseStatus(statusCode: error.status.code)
        var answer = ByteBuffer(
            string: "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n"
                + "Content-Type: \(APIError.contentType)\r\nContent-Length: \(body.readableBytes)\r\nConnection: close\r\n\r\n")
        answer.writeImmutableBuffer(body)
        let channel = context.channel
        context.writeAndFlush(NIOAny(answer)).whenComplete { _ in channel.close(promise: nil) }
    }
}

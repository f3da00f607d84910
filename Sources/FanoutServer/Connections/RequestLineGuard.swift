import NIOCore

/// Reads a request's first line before NIO's HTTP decoder does, for the two refusals the decoder
/// would word wrongly: a request target longer than `RequestGuard.maxURILength` is 414 however
/// long (the decoder stops at its 80 KiB header limit and says 431), and a request line ending
/// in a bare LF is 400 (the decoder takes it for another HTTP version: 505).
///
/// It looks at a request line only, byte by byte, and passes everything on as it came;
/// `RequestGuard` tells it when a request has ended, so the next line is looked at too. (A
/// second request sent before the first was read, pipelined in the same packet, is left to the
/// decoder.) A refusal is answered by `RequestGuard`, like the decoder's errors. A WebSocket
/// upgrade or an event stream removes it with the HTTP handlers.
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

    /// Why a request line was refused: `RequestGuard`, after the decoder, answers it as it
    /// answers the decoder's own errors.
    struct Refused: Error {
        let answer: APIError
    }

    /// Reads nothing more, and hands the refusal to `RequestGuard` (the error passes the
    /// decoder, which has seen none of the refused line's last bytes).
    private func refuse(_ context: ChannelHandlerContext, _ answer: APIError) {
        refused = true
        context.fireErrorCaught(Refused(answer: answer))
    }
}

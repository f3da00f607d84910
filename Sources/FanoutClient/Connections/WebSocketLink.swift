import FanoutProtocol
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// One WebSocket to `/subscribe`, on SwiftNIO's client upgrader and frame codec: text messages
/// in (fragments put together, pings answered, the close handshake answered), text messages out
/// (masked, as a client must).
struct WebSocketLink {
    private enum Upgrade {
        case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case refused
    }

    /// The largest message taken: far above any the server sends (a snapshot part is at most
    /// 256 KiB unless one cart alone is larger), yet bounded.
    static let maxMessageSize = 16 << 20

    /// Connects and upgrades, then runs `body` with the messages and a writer until `body`
    /// returns or the connection ends. Returns the server's close code, if it sent one.
    ///
    /// - Throws: `RemoteStoreError.unreachable` when no connection could be made,
    ///   `UpgradeRefused` when the server answered the upgrade with an error.
    static func run(
        url: URL, trust: ServerTrust, token: String?,
        _ body: (_ messages: Messages, _ writer: Writer) async throws -> Void
    ) async throws -> Int? {
        let endpoint = try Endpoint(url, trust: trust)
        var headers = HTTPHeaders([("Host", endpoint.hostHeader)])
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: Endpoint.target(of: url), headers: headers)
        let upgrade: EventLoopFuture<Upgrade>
        do {
            upgrade = try await endpoint.connect(ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.seconds(5)))
            {
                channel in
                channel.eventLoop.makeCompletedFuture {
                    try endpoint.secure(channel)
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(maxFrameSize: maxMessageSize) { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            .upgraded(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                        }
                    }
                    var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
                        upgradeConfiguration: NIOTypedHTTPClientUpgradeConfiguration(
                            upgradeRequestHead: head, upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in
                                channel.close(promise: nil)
                                return channel.eventLoop.makeSucceededFuture(.refused)
                            }))
                    // The server may send its welcome in the same read as its 101 answer.
                    configuration.leftOverBytesStrategy = .forwardBytes
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: configuration)
                }
            }
        } catch {
            throw endpoint.unreachable(error)
        }
        let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
        do {
            switch try await upgrade.get() {
            case .upgraded(let upgraded): channel = upgraded
            case .refused: throw UpgradeRefused()
            }
        } catch let refused as UpgradeRefused {
            throw refused
        } catch {
            throw RemoteStoreError.unreachable("the WebSocket upgrade failed (\(Endpoint.reason(error)))")
        }
        return try await channel.executeThenClose { inbound, outbound in
            let writer = Writer(outbound: outbound)
            let messages = Messages(frames: inbound, writer: writer)
            try await body(messages, writer)
            return messages.closeCode
        }
    }

    /// The server answered the upgrade with an error (the HTTP API says which).
    struct UpgradeRefused: Error {}

    /// Sends text messages, and the frames the protocol answers with.
    struct Writer: Sendable {
        let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>

        func send(_ message: ClientMessage) async throws {
            try await outbound.write(Self.frame(.text, ByteBuffer(string: try message.jsonText())))
        }

        /// A normal close (1000): the server sees the subscriber leave at once.
        func close() async throws {
            var code = ByteBuffer()
            code.writeInteger(UInt16(1000))
            try await outbound.write(Self.frame(.connectionClose, code))
        }

        func send(_ frame: WebSocketFrame) async throws {
            try await outbound.write(frame)
        }

        /// A final frame from a client: masked, as RFC 6455 requires (the encoder applies the key).
        static func frame(_ opcode: WebSocketOpcode, _ data: ByteBuffer) -> WebSocketFrame {
            WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: data)
        }
    }

    /// The text messages of the connection, whole.
    final class Messages: AsyncSequence, @unchecked Sendable {
        typealias Element = String
        let frames: NIOAsyncChannelInboundStream<WebSocketFrame>
        let writer: Writer
        /// The close code the server sent (read after the sequence ends). Only the iterating
        /// task touches it.
        var closeCode: Int?

        init(frames: NIOAsyncChannelInboundStream<WebSocketFrame>, writer: Writer) {
            self.frames = frames
            self.writer = writer
        }

        func makeAsyncIterator() -> Iterator { Iterator(messages: self, frames: frames.makeAsyncIterator()) }

        struct Iterator: AsyncIteratorProtocol {
            let messages: Messages
            var frames: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
            var pending: ByteBuffer?

            mutating func next() async throws -> String? {
                while let frame = try await frames.next() {
                    switch frame.opcode {
                    case .text where frame.fin:
                        return String(buffer: frame.unmaskedData)
                    case .text:
                        pending = frame.unmaskedData
                    case .continuation:
                        guard var message = pending else { continue }
                        var part = frame.unmaskedData
                        guard message.readableBytes + part.readableBytes <= WebSocketLink.maxMessageSize else {
                            throw RemoteStoreError.unexpectedAnswer("a server message over \(WebSocketLink.maxMessageSize) bytes")
                        }
                        message.writeBuffer(&part)
                        if frame.fin {
                            pending = nil
                            return String(buffer: message)
                        }
                        pending = message
                    case .ping:
                        try await messages.writer.send(Writer.frame(.pong, frame.unmaskedData))
                    case .connectionClose:
                        // Echo the status code (RFC 6455 §5.5.1); the server then closes.
                        var payload = frame.unmaskedData
                        let code = payload.getInteger(at: payload.readerIndex, as: UInt16.self)
                        messages.closeCode = code.map(Int.init)
                        let echo = payload.readSlice(length: Swift.min(2, payload.readableBytes)) ?? ByteBuffer()
                        try? await messages.writer.send(Writer.frame(.connectionClose, echo))
                        return nil
                    default:
                        continue
                    }
                }
                return nil
            }
        }
    }
}

import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// An event-stream (`text/event-stream`) client on plain NIO, as a browser's `EventSource` reads
/// one: it sends the request, then parses the answer's head and its events as they arrive. It
/// can stop reading, as a stalled tab does, and is driven by its event loop, never by a thread
/// of the concurrency pool.
final class EventStreamClient: Sendable {
    struct Event: Sendable, Equatable {
        var id: Int64?
        var name: String
        var data: String

        /// The `seq` in the data's JSON, if any.
        var seq: Int64? {
            let object = (try? JSONSerialization.jsonObject(with: Data(data.utf8))) as? [String: Any]
            return (object?["seq"] as? NSNumber)?.int64Value
        }
    }

    private final class Parser: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let state = NIOLockedValueBox(State())

        struct State {
            var bytes: [UInt8] = []
            var head: String?
            var events: [Event] = []
            var comments: [String] = []
            var retry: Int?
            var closed = false
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            state.withLockedValue { state in
                state.bytes += buffer.readableBytesView
                Self.parse(&state)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            state.withLockedValue { $0.closed = true }
            context.fireChannelInactive()
        }

        static func parse(_ state: inout State) {
            if state.head == nil {
                guard let end = state.bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
                state.head = String(decoding: state.bytes[..<end.lowerBound], as: UTF8.self)
                state.bytes.removeSubrange(..<end.upperBound)
            }
            guard state.head?.hasPrefix("HTTP/1.1 200") == true else { return }
            while let end = state.bytes.firstRange(of: Array("\n\n".utf8)) {
                let block = String(decoding: state.bytes[..<end.lowerBound], as: UTF8.self)
                state.bytes.removeSubrange(..<end.upperBound)
                var event = Event(id: nil, name: "message", data: "")
                var isEvent = false
                for line in block.split(separator: "\n", omittingEmptySubsequences: false) {
                    if line.hasPrefix(": ") {
                        state.comments.append(String(line.dropFirst(2)))
                    } else if line.hasPrefix("retry: ") {
                        state.retry = Int(line.dropFirst(7))
                    } else if line.hasPrefix("id: ") {
                        event.id = Int64(line.dropFirst(4))
                    } else if line.hasPrefix("event: ") {
                        event.name = String(line.dropFirst(7))
                    } else if line.hasPrefix("data: ") {
                        event.data = String(line.dropFirst(6))
                        isEvent = true
                    }
                }
                if isEvent { state.events.append(event) }
            }
        }
    }

    private let parser = Parser()
    private let channel: any Channel

    /// Opens `GET path` with `Accept: text/event-stream` and `headers`.
    init(port: Int, path: String = "/subscribe", headers: [(String, String)] = [], receiveBuffer: Int32? = nil) async throws {
        let parser = self.parser
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(parser) }
            }
        let bootstrapWithBuffer =
            receiveBuffer.map { size in
                bootstrap.channelOption(ChannelOptions.socketOption(.so_rcvbuf), value: SocketOptionValue(size))
            } ?? bootstrap
        channel = try await bootstrapWithBuffer.connect(host: "127.0.0.1", port: port).get()
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAccept: text/event-stream\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        request += "\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: request)).get()
    }

    /// The status line and headers, once they arrived.
    var head: String? { parser.state.withLockedValue { $0.head } }
    var status: Int? { head.flatMap { Int($0.dropFirst(9).prefix(3)) } }
    /// The body of an answer that is not a stream (a refusal's JSON), once the server closed.
    var refusalBody: String? { parser.state.withLockedValue { $0.closed ? String(decoding: $0.bytes, as: UTF8.self) : nil } }
    var events: [Event] { parser.state.withLockedValue { $0.events } }
    var comments: [String] { parser.state.withLockedValue { $0.comments } }
    var retry: Int? { parser.state.withLockedValue { $0.retry } }
    var isClosed: Bool { parser.state.withLockedValue { $0.closed } }

    /// The events named `event`: the cart events.
    var cartEvents: [Event] { events.filter { $0.name == "event" } }
    var snapshots: [Event] { events.filter { $0.name == "snapshot" } }
    /// The last `id:` seen: what a browser sends back as `Last-Event-ID`.
    var lastEventID: Int64? { events.last { $0.id != nil }?.id }

    /// Stops reading, as a stalled tab does: the server's bytes pile up in the socket.
    func stopReading() async throws {
        try await channel.setOption(ChannelOptions.autoRead, value: false).get()
    }

    /// Sends `bytes` after the request, which a stream's server reads and drops.
    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes)).get()
    }

    func close() async {
        try? await channel.close().get()
    }

    /// Closes with a reset (`SO_LINGER` 0) instead of a FIN, as a client that crashed or was
    /// killed mid-stream does.
    func reset() async {
        let linger = (channel as? any SocketOptionProvider)?.setSoLinger(linger(l_onoff: 1, l_linger: 0))
        try? await linger?.get()
        try? await channel.close().get()
    }
}

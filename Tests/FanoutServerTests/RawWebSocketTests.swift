import CartStore
import FanoutTestSupport
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import FanoutServer

#if canImport(Glibc)
    import Glibc
#endif

/// A WebSocket client on a bare socket, for what a library client will not send or show:
/// refused upgrades' answers, fragments, pings and pongs. Its calls block: use it through
/// `onThreadOfItsOwn`.
final class RawWebSocket: @unchecked Sendable {
    struct Frame: Equatable {
        var opcode: UInt8
        var fin = true
        var payload: [UInt8]
    }

    let socket: Int32
    private var pending: [UInt8] = []

    init(port: Int, receiveBuffer: Int32? = nil) throws {
        socket = try connectedSocket(port: port) { socket in
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            if var size = receiveBuffer {
                setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
        }
    }

    deinit { close(socket) }

    /// Sends the upgrade request; returns the response head, and the body when there is one.
    func upgrade(path: String = "/subscribe", headers: [String: String] = [:]) throws -> (head: String, body: String) {
        var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        try send(Array((request + "\r\n").utf8))
        while pending.firstRange(of: Array("\r\n\r\n".utf8)) == nil { try receive() }
        let end = pending.firstRange(of: Array("\r\n\r\n".utf8))!.upperBound
        let head = String(decoding: pending[..<end], as: UTF8.self)
        pending.removeFirst(end)
        guard !head.hasPrefix("HTTP/1.1 101") else { return (head, "") }
        // A refusal closes the connection after its body.
        while (try? receive()) != nil {}
        return (head, String(decoding: pending, as: UTF8.self))
    }

    /// Sends a frame, masked as a client must (RFC 6455 §5.3).
    func send(_ frame: Frame) throws {
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        var bytes: [UInt8] = [(frame.fin ? 0x80 : 0) | frame.opcode]
        if frame.payload.count < 126 {
            bytes.append(0x80 | UInt8(frame.payload.count))
        } else {
            bytes += [0x80 | 126, UInt8(frame.payload.count >> 8), UInt8(frame.payload.count & 0xFF)]
        }
        bytes += mask + frame.payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        try send(bytes)
    }

    func sendText(_ text: String, fin: Bool = true) throws {
        try send(Frame(opcode: 0x1, fin: fin, payload: Array(text.utf8)))
    }

    /// The next frame from the server; nil once the connection ends.
    func next() throws -> Frame? {
        while true {
            if let (payload, used) = StalledClient.frame(in: pending) {
                let frame = Frame(opcode: pending[0] & 0x0F, fin: pending[0] & 0x80 != 0, payload: payload)
                pending.removeFirst(used)
                return frame
            }
            guard (try? receive()) != nil else { return nil }
        }
    }

    /// Frames until one `matches` (included) or the connection ends.
    func frames(until matches: (Frame) -> Bool) throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try next() {
            frames.append(frame)
            if matches(frame) { break }
        }
        return frames
    }

    /// Sends bytes as they are (a frame built by hand, unmasked, say).
    func send(_ bytes: [UInt8]) throws {
        guard retryingInterrupted({ Glibc.send(socket, bytes, bytes.count, Int32(MSG_NOSIGNAL)) }) == bytes.count else {
            throw POSIXError(.EIO)
        }
    }

    private func receive() throws {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let count = retryingInterrupted { recv(socket, &chunk, chunk.count, 0) }
        guard count > 0 else { throw POSIXError(.ECONNRESET) }
        pending += chunk[0..<count]
    }
}

extension RawWebSocket.Frame {
    var text: String { String(decoding: payload, as: UTF8.self) }
    var closeCode: Int? { opcode == 0x8 && payload.count >= 2 ? Int(payload[0]) << 8 | Int(payload[1]) : nil }
    var isError: Bool { opcode == 0x1 && text.contains(#""type":"error""#) }
}

@Suite("WebSocket frames and refusals", .timeLimit(.minutes(2)))
struct RawWebSocketTests {
    /// These raw clients send no heartbeats: leases long enough that none lapses on a slow
    /// machine between a test's steps.
    static func quietLeases(_ configuration: inout ServerConfiguration) {
        configuration.leaseTTL = .seconds(60)
        configuration.heartbeatInterval = .seconds(30)
    }

    @Test func refusedUpgradesAreAnsweredWithTheJSONError() async throws {
        try await withServer({
            $0.token = "t0k"
            $0.maxSubscribers = 1
            $0.allowedOrigins = ["http://ok.example"]
            Self.quietLeases(&$0)
        }) { port, server in
            let noToken = try await onThreadOfItsOwn { try RawWebSocket(port: port).upgrade() }
            #expect(noToken.head.hasPrefix("HTTP/1.1 401"))
            #expect(noToken.body.contains(#""code":"unauthorized""#))
            let badOrigin = try await onThreadOfItsOwn {
                try RawWebSocket(port: port).upgrade(path: "/subscribe?token=t0k", headers: ["Origin": "http://evil.example"])
            }
            #expect(badOrigin.head.hasPrefix("HTTP/1.1 403"))
            #expect(badOrigin.body.contains(#""code":"origin_not_allowed""#))
            let elsewhere = try await onThreadOfItsOwn { try RawWebSocket(port: port).upgrade(path: "/carts?token=t0k") }
            #expect(elsewhere.head.hasPrefix("HTTP/1.1 404"))

            let first = try RawWebSocket(port: port)
            let accepted = try await onThreadOfItsOwn { try first.upgrade(headers: ["Authorization": "Bearer t0k"]) }
            #expect(accepted.head.hasPrefix("HTTP/1.1 101"))
            await eventually("connected") { server.hub.stats.subscribers == 1 }
            let full = try await onThreadOfItsOwn { try RawWebSocket(port: port).upgrade(path: "/subscribe?token=t0k") }
            #expect(full.head.hasPrefix("HTTP/1.1 503"))
            #expect(full.body.contains(#""code":"server_full""#))
        }
    }

    @Test func pingsArePongedAndFragmentsJoinedUpToTheSizeLimit() async throws {
        try await withServer({
            $0.maxMessageSize = 1_000
            Self.quietLeases(&$0)
        }) { port, server in
            let client = try RawWebSocket(port: port)
            let frames = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                _ = try client.upgrade()
                let welcome = try client.next()
                try client.send(.init(opcode: 0x9, payload: Array("are you there".utf8)))
                let pong = try client.next()
                // A subscribe in three fragments, with a ping between two of them.
                try client.sendText(#"{"type":"subs"#, fin: false)
                try client.send(.init(opcode: 0x0, fin: false, payload: Array(#"cri"#.utf8)))
                try client.send(.init(opcode: 0x9, payload: []))
                try client.send(.init(opcode: 0x0, payload: Array(#"be"}"#.utf8)))
                return [welcome, pong].compactMap { $0 } + (try client.frames { $0.text.contains(#""type":"snapshot""#) })
            }
            #expect(frames.first?.text.contains(#""type":"welcome""#) == true)
            #expect(frames.dropFirst().first == .init(opcode: 0xA, payload: Array("are you there".utf8)))
            #expect(frames.contains { $0.opcode == 0xA && $0.payload.isEmpty }, "the ping between fragments")
            #expect(frames.last?.text.contains(#""type":"snapshot""#) == true, "the joined subscribe")
            #expect(!frames.contains { $0.isError })

            // Fragments that together pass the limit: bad_frame, then 1009.
            let ending = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                try client.sendText(String(repeating: " ", count: 600), fin: false)
                try client.send(.init(opcode: 0x0, payload: Array(String(repeating: " ", count: 600).utf8)))
                let frames = try client.frames { $0.opcode == 0x8 }
                try client.send(.init(opcode: 0x8, payload: [0x03, 0xE8]))
                return frames
            }
            #expect(ending.contains { $0.isError && $0.text.contains("bad_frame") })
            #expect(ending.last?.closeCode == 1009)
            await eventually("disconnected") { server.hub.stats.subscribers == 0 }
        }
    }

    /// A message in more fragments than a message may have is a message too large (1009), as
    /// PROTOCOL.md says, not a broken frame (1002), however few its bytes.
    @Test func aMessageInTooManyFragmentsIsTooLarge() async throws {
        try await withServer(Self.quietLeases) { port, _ in
            let client = try RawWebSocket(port: port)
            let frames = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                _ = try client.upgrade()
                _ = try client.next()
                try client.sendText(" ", fin: false)
                for _ in 0..<WebSocketTransport.maxFragments {
                    try client.send(.init(opcode: 0x0, fin: false, payload: [0x20]))
                }
                return try client.frames { $0.opcode == 0x8 }
            }
            #expect(frames.contains { $0.isError && $0.text.contains("fragments") })
            #expect(frames.last?.closeCode == 1009)
        }
    }

    /// RFC 6455 §5.4 lets any fragment be empty, the first one included: a message of empty
    /// fragments and one that carries the text is a message like any other.
    @Test(arguments: ["", #"{"type":"#])
    func emptyFragmentsAreAccepted(first: String) async throws {
        try await withServer(Self.quietLeases) { port, _ in
            let client = try RawWebSocket(port: port)
            let rest = Array(#"{"type":"subscribe"}"#.utf8.dropFirst(first.utf8.count))
            let frames = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                _ = try client.upgrade()
                _ = try client.next()
                try client.sendText(first, fin: false)
                for _ in 0..<3 { try client.send(.init(opcode: 0x0, fin: false, payload: [])) }
                try client.send(.init(opcode: 0x0, payload: rest))
                return try client.frames { $0.text.contains(#""type":"snapshot""#) || $0.isError || $0.opcode == 0x8 }
            }
            #expect(!frames.contains { $0.isError }, "\(frames.map(\.text))")
            #expect(frames.last?.text.contains(#""type":"snapshot""#) == true, "the joined subscribe: \(frames.map(\.text))")
        }
    }

    /// The bound is on fragments, empty or not: 1 024 make a message, 1 025 are too many (1009,
    /// as PROTOCOL.md says), not a broken frame (1002).
    @Test func aThousandAndTwentyFourEmptyFragmentsAreAMessageAndOneMoreIsTooMany() async throws {
        try await withServer(Self.quietLeases) { port, _ in
            let client = try RawWebSocket(port: port)
            let accepted = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                _ = try client.upgrade()
                _ = try client.next()
                try client.sendText("", fin: false)
                for _ in 0..<(WebSocketTransport.maxFragments - 2) { try client.send(.init(opcode: 0x0, fin: false, payload: [])) }
                try client.send(.init(opcode: 0x0, payload: Array(#"{"type":"subscribe"}"#.utf8)))
                return try client.frames { $0.text.contains(#""type":"snapshot""#) || $0.isError || $0.opcode == 0x8 }
            }
            #expect(accepted.last?.text.contains(#""type":"snapshot""#) == true, "\(accepted.map(\.text))")

            let refused = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                try client.sendText("", fin: false)
                for _ in 0..<WebSocketTransport.maxFragments { try client.send(.init(opcode: 0x0, fin: false, payload: [])) }
                return try client.frames { $0.opcode == 0x8 }
            }
            #expect(refused.contains { $0.isError && $0.text.contains("fragments") })
            #expect(refused.last?.closeCode == 1009)
        }
    }

    @Test func aClientCloseIsAnsweredAndTheSubscriberForgotten() async throws {
        try await withServer(Self.quietLeases) { port, server in
            let client = try RawWebSocket(port: port)
            let reply = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                _ = try client.upgrade()
                _ = try client.next()
                try client.send(.init(opcode: 0x8, payload: [0x03, 0xE8]))
                return try client.frames { $0.opcode == 0x8 }
            }
            #expect(reply.last?.closeCode == 1000)
            let ended = try await onThreadOfItsOwn { try client.next() }
            #expect(ended == nil, "the server closes the connection after its close frame")
            await eventually("forgotten") { server.hub.stats.subscribers == 0 }
        }
    }

    @Test func unmaskedFramesAndInvalidUTF8AreProtocolErrors() async throws {
        try await withServer(Self.quietLeases) { port, server in
            /// The frames up to the server's close, after `send` on a fresh subscriber.
            func closing(after send: @escaping @Sendable (RawWebSocket) throws -> Void) async throws -> [RawWebSocket.Frame] {
                try await onThreadOfItsOwn {
                    let client = try RawWebSocket(port: port)
                    _ = try client.upgrade()
                    _ = try client.next()
                    try send(client)
                    return try client.frames { $0.opcode == 0x8 }
                }
            }
            let unmasked = try await closing { try $0.send([0x81, 0x02] + Array("{}".utf8)) }
            #expect(unmasked.last?.closeCode == 1002)
            let badText = try await closing { try $0.send(.init(opcode: 0x1, payload: [0x7B, 0xC3, 0x28, 0x7D])) }
            #expect(badText.last?.closeCode == 1007)
            let badReason = try await closing { try $0.send(.init(opcode: 0x8, payload: [0x03, 0xE8, 0xC3, 0x28])) }
            #expect(badReason.last?.closeCode == 1007)
            await eventually("all three counted") { server.hub.stats.ended["protocolError"] == 3 }
        }
    }
}

/// The WebSocket transport on an `EmbeddedChannel`: the test decides when the connection has
/// room, and what time it is.
@Suite("WebSocket transport")
struct WebSocketTransportTests {
    /// A transport welcomed on a fresh channel (its welcome already read), and its hub.
    static func transport(leaseTTL: TimeAmount = .seconds(60)) async throws -> (EmbeddedChannel, FanoutHub) {
        let channel = EmbeddedChannel()
        let store = try CartStore.inMemory()
        var logger = Logger(label: "transport-test")
        logger.logLevel = .critical
        let hub = FanoutHub(store: store, latestSeq: 0, settings: .init(leaseTTL: leaseTTL), logger: logger)
        let endpoint = SubscribeEndpoint(
            hub: hub, configuration: ServerConfiguration(), hosts: HostPolicy(listeningOn: "127.0.0.1", allowedHosts: []),
            access: AccessPolicy(token: nil, tokenKeys: nil, allowedOrigins: []))
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).get()
        try channel.pipeline.syncOperations.addHandlers(
            WebSocketFrameEncoder(), WebSocketTransport(endpoint: endpoint, grant: .operator, logger: logger))
        _ = try channel.readOutbound(as: ByteBuffer.self)  // the welcome
        return (channel, hub)
    }

    /// A client's text frame, masked as a client sends it.
    static func text(_ text: String) -> WebSocketFrame {
        var payload = ByteBuffer(string: text)
        payload.webSocketMask([1, 2, 3, 4])
        return WebSocketFrame(fin: true, opcode: .text, maskKey: [1, 2, 3, 4], data: payload)
    }

    /// Every frame the transport wrote since the last call, in order.
    static func written(_ channel: EmbeddedChannel) throws -> [RawWebSocket.Frame] {
        var bytes: [UInt8] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { bytes += buffer.readableBytesView }
        var frames: [RawWebSocket.Frame] = []
        while let (payload, used) = StalledClient.frame(in: bytes) {
            frames.append(.init(opcode: bytes[0] & 0x0F, fin: bytes[0] & 0x80 != 0, payload: payload))
            bytes.removeFirst(used)
        }
        #expect(bytes.isEmpty, "whole frames only")
        return frames
    }

    @Test func aPingFloodFromAClientThatDoesNotReadCostsOnePendingPong() async throws {
        let (channel, hub) = try await Self.transport()
        channel.isWritable = false
        for index in 0..<10_000 {
            // Masked, as a client sends it.
            var payload = ByteBuffer(string: "ping \(index)")
            payload.webSocketMask([1, 2, 3, 4])
            let ping = WebSocketFrame(fin: true, opcode: .ping, maskKey: [1, 2, 3, 4], data: payload)
            try channel.writeInbound(ping)
        }
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil, "nothing is written to a connection without room")
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        let pong = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(pong == WebSocketFrames.pong(ByteBuffer(string: "ping 9999")), "the newest ping is answered")
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil, "and only it")
        #expect(hub.stats.subscribers == 1)
        _ = try? channel.finish()
    }

    /// The answers owed to a client that sends and never reads (a `bad_message` error each, here)
    /// are bounded like its pongs: at most 16 KiB of them wait beyond the connection's high-water
    /// mark, and the one past that ends it as too slow (4001). A million such messages used to
    /// queue a million answers, 359 MiB, on a connection that never ended.
    @Test func answersOwedToAClientThatDoesNotReadAreBoundedThenItEndsAsTooSlow() async throws {
        let (channel, hub) = try await Self.transport()
        // With room, every message is answered, however many.
        for _ in 0..<500 { try channel.writeInbound(Self.text(#"{"type":"nope"}"#)) }
        #expect(try Self.written(channel).filter(\.isError).count == 500)
        // Without room, some answers wait, and the bound starts again once the connection drains.
        for _ in 0..<2 {
            channel.isWritable = false
            for _ in 0..<50 { try channel.writeInbound(Self.text(#"{"type":"nope"}"#)) }
            channel.isWritable = true
            channel.pipeline.fireChannelWritabilityChanged()
        }
        #expect(try Self.written(channel).filter(\.isError).count == 100)
        #expect(hub.stats.subscribers == 1)

        channel.isWritable = false
        for _ in 0..<10_000 { try channel.writeInbound(Self.text(#"{"type":"nope"}"#)) }
        let written = try Self.written(channel)
        let answers = written.filter(\.isError)
        #expect(answers.reduce(0) { $0 + $1.payload.count + 2 } <= 16 * 1_024, "\(answers.count) answers waiting")
        #expect(written.last?.closeCode == Int(FanoutCloseCode.tooSlow.rawValue), "then the close frame, and nothing after it")
        #expect(written.count == answers.count + 1)
        #expect(hub.stats.ended["tooSlow"] == 1)
        #expect(hub.stats.subscribers == 0)
        // Once the connection is gone, nothing of it is held.
        weak let transport = try channel.pipeline.syncOperations.handler(type: WebSocketTransport.self)
        _ = try? channel.finish()
        #expect(transport == nil)
        #expect(hub.stats.connections == 0)
    }

    /// A sign of life is a message of the protocol: a client that only sends what the server
    /// cannot read (`bad_message`) lets its lease lapse, as a silent one does.
    @Test func badMessagesDoNotRenewTheLease() async throws {
        let (flooding, floodingHub) = try await Self.transport(leaseTTL: .seconds(10))
        let (heartbeating, heartbeatingHub) = try await Self.transport(leaseTTL: .seconds(10))
        for _ in 0..<10 {
            flooding.embeddedEventLoop.advanceTime(by: .seconds(2))
            heartbeating.embeddedEventLoop.advanceTime(by: .seconds(2))
            try flooding.writeInbound(Self.text(#"{"type":"nope"}"#))
            try heartbeating.writeInbound(Self.text(#"{"type":"heartbeat"}"#))
        }
        #expect(try Self.written(flooding).last?.closeCode == Int(FanoutCloseCode.leaseExpired.rawValue))
        #expect(floodingHub.stats.ended["leaseExpired"] == 1)
        #expect(try Self.written(heartbeating).isEmpty)
        #expect(heartbeatingHub.stats.subscribers == 1)
        _ = try? flooding.finish()
        _ = try? heartbeating.finish()
    }
}

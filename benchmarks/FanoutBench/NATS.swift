import Foundation
import NIOCore
import NIOPosix

/// The few pieces of the NATS core client protocol the bench speaks
/// (<https://docs.nats.io/reference/reference-protocols/nats-protocol>): one subject, publishes
/// confirmed by a PING/PONG round trip, subscribers counting `MSG` payloads.
enum NATS {
    /// The subject every publish goes to and every subscriber follows, as nchan's one channel.
    static let subject = "bench"

    /// Sent once the server's INFO has arrived: plain messages, no `+OK` after each command.
    static let connect = #"CONNECT {"verbose":false,"pedantic":false,"protocol":1}"# + "\r\n"

    /// A subscriber's whole handshake: the PONG answering its PING says the SUB is in place
    /// (the server handles a connection's commands in order), so writes may start.
    static let subscribe = connect + "SUB \(subject) 1\r\nPING\r\n"

    /// One publish of `{"seq":N}`, then a PING: its PONG comes once the server has handled the
    /// publish, which acknowledges it.
    static func publish(seq: Int64) -> String {
        let payload = BenchTarget.published(seq: seq)
        return "PUB \(subject) \(payload.utf8.count)\r\n\(payload)\r\nPING\r\n"
    }

    static let pong = "PONG\r\n"
}

/// Reads what a NATS server sends from a byte stream cut anywhere: a WebSocket frame, or a TCP
/// read, may end inside a line or a payload and may hold several operations. Bytes are looked
/// at where they arrived; only an operation left incomplete at the end of a read is copied,
/// and read again with the next bytes.
struct NATSReader {
    /// One operation from the server. A message's payload is only valid during the call.
    enum Operation {
        case info
        case message(payload: UnsafeRawBufferPointer)
        case ping
        case pong
        case ok
        case error(String)
    }

    /// The start of an operation the previous reads ended inside: at most `longestOperation`
    /// bytes (a line with no end in sight, or a payload larger than a server sends, fails the run).
    private var pending: [UInt8] = []
    /// nats-server's largest payload by default (1 MiB), with room for its `MSG` line.
    static let longestOperation = (1 << 20) + 1_024

    /// Hands every complete operation in `bytes` (after what is pending) to `handle`, in order.
    mutating func read(_ bytes: UnsafeRawBufferPointer, _ handle: (Operation) -> Void) throws {
        if pending.isEmpty {
            let used = try Self.parse(bytes, handle)
            pending += bytes[used...]
        } else {
            pending += bytes
            let used = try pending.withUnsafeBytes { try Self.parse($0, handle) }
            pending.removeFirst(used)
        }
        guard pending.count <= Self.longestOperation else {
            throw BenchFailure("a NATS operation longer than \(Self.longestOperation) bytes")
        }
    }

    /// Parses whole operations from the start of `bytes`; returns how many bytes they took.
    private static func parse(_ bytes: UnsafeRawBufferPointer, _ handle: (Operation) -> Void) throws -> Int {
        var start = 0
        while let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            var end = newline
            if end > start, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let line = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
            var next = newline + 1
            if line.starts(with: msg) {
                // MSG <subject> <sid> [reply-to] <#bytes>, then the payload and CRLF.
                guard let size = lastNumber(in: line) else { throw BenchFailure("bad NATS line \(text(line))") }
                guard bytes.count >= next + size + 2 else { return start }
                handle(.message(payload: UnsafeRawBufferPointer(rebasing: bytes[next..<next + size])))
                next += size + 2
            } else if line.starts(with: ping) {
                handle(.ping)
            } else if line.starts(with: pong) {
                handle(.pong)
            } else if line.starts(with: info) {
                handle(.info)
            } else if line.starts(with: ok) {
                handle(.ok)
            } else if line.starts(with: error) {
                handle(.error(text(line)))
            } else {
                throw BenchFailure("unexpected NATS line \(text(line))")
            }
            start = next
        }
        return start
    }

    private static let msg = Array("MSG ".utf8)
    private static let ping = Array("PING".utf8)
    private static let pong = Array("PONG".utf8)
    private static let info = Array("INFO".utf8)
    private static let ok = Array("+OK".utf8)
    private static let error = Array("-ERR".utf8)

    /// The number that ends `line`.
    private static func lastNumber(in line: UnsafeRawBufferPointer) -> Int? {
        var value = 0
        var scale = 1
        var index = line.endIndex
        while index > line.startIndex, case let digit = line[index - 1], (48...57).contains(digit) {
            value += Int(digit - 48) * scale
            scale *= 10
            index -= 1
        }
        return index < line.endIndex ? value : nil
    }

    private static func text(_ line: UnsafeRawBufferPointer) -> String {
        String(decoding: line.prefix(200), as: UTF8.self)
    }
}

/// One NATS connection over TCP that publishes, each publish acknowledged by the PONG to the
/// PING that follows it: a writer waits for that, as an HTTP writer waits for its response.
final class NATSPublisher: Sendable {
    private let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// Connects to `url` (`nats://host:port`), sends CONNECT and waits for its PONG.
    static func connect(to url: String, group: any EventLoopGroup) async throws -> NATSPublisher {
        guard let components = URLComponents(string: url), components.scheme == "nats", let host = components.host,
            let port = components.port
        else { throw BenchFailure("bad NATS URL \(url) (nats://host:port)") }
        let channel = try await ClientBootstrap(group: group)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(NATSPublisherHandler()) }
            }
            .connect(host: host, port: port).get()
        let publisher = NATSPublisher(channel: channel)
        try await publisher.roundTrip(NATS.connect + "PING\r\n")
        return publisher
    }

    /// Publishes `{"seq":N}`; returns once the server has acknowledged it.
    func publish(seq: Int64) async throws {
        try await roundTrip(NATS.publish(seq: seq))
    }

    /// Sends `commands`, which end with a PING, and waits for its PONG.
    private func roundTrip(_ commands: String) async throws {
        let pong = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(NATSPublisherHandler.Request(bytes: ByteBuffer(string: commands), pong: pong))
            .whenFailure { pong.fail($0) }
        try await pong.futureResult.get()
    }
}

/// A publisher's pipeline: pairs each PONG with the oldest request waiting for one, answers
/// the server's PING, and fails whatever waits when the server says -ERR or the connection ends.
private final class NATSPublisherHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Request
    typealias OutboundOut = ByteBuffer

    struct Request: Sendable {
        var bytes: ByteBuffer
        var pong: EventLoopPromise<Void>
    }

    private var reader = NATSReader()
    /// One per request written, oldest first: the server answers PINGs in order.
    private var waiting = CircularBuffer<EventLoopPromise<Void>>()

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        waiting.append(request.pong)
        context.write(wrapOutboundOut(request.bytes), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        var failure: (any Error)?
        var pingsToAnswer = 0
        do {
            try buffer.withUnsafeReadableBytes { bytes in
                try reader.read(bytes) { operation in
                    switch operation {
                    case .pong: waiting.popFirst()?.succeed()
                    case .ping: pingsToAnswer += 1
                    case .error(let line): failure = failure ?? BenchFailure("NATS said \(line)")
                    case .info, .ok, .message: break
                    }
                }
            }
        } catch {
            failure = error
        }
        for _ in 0..<pingsToAnswer {
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: NATS.pong)), promise: nil)
        }
        if let failure { fail(failure, context: context) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failWaiting(BenchFailure("the NATS connection closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(error, context: context)
    }

    private func fail(_ error: any Error, context: ChannelHandlerContext) {
        failWaiting(error)
        context.close(promise: nil)
    }

    private func failWaiting(_ error: any Error) {
        while let pong = waiting.popFirst() { pong.fail(error) }
    }
}

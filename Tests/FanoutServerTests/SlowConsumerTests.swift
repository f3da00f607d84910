import CartStore
import FanoutTestSupport
import Foundation
import Testing

@testable import FanoutServer

#if canImport(Glibc)
    import Glibc
#endif

/// A WebSocket client on a bare socket with a tiny receive buffer that subscribes and then
/// never reads: the slowest consumer there is.
///
/// Its socket calls block, so they run on a thread of their own (`blocking`), never on the
/// concurrency pool that the in-process server needs to answer them.
final class StalledClient: @unchecked Sendable {
    let socket: Int32

    static func connect(port: Int) async throws -> StalledClient {
        try await onThreadOfItsOwn { try StalledClient(port: port) }
    }

    private init(port: Int) throws {
        socket = try connectedSocket(port: port) { socket in
            var size: Int32 = 2_048
            setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        try send(
            Array(
                """
                GET /subscribe HTTP/1.1\r
                Host: 127.0.0.1:\(port)\r
                Upgrade: websocket\r
                Connection: Upgrade\r
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r
                Sec-WebSocket-Version: 13\r
                \r

                """.utf8))
        // Read the 101 response only, byte by byte, so nothing after it is consumed.
        var head: [UInt8] = []
        while !head.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            var byte: UInt8 = 0
            guard retryingInterrupted({ recv(socket, &byte, 1, 0) }) == 1 else { throw POSIXError(.ECONNRESET) }
            head.append(byte)
        }
        guard String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 101") else { throw POSIXError(.EPROTO) }
        try send(Self.maskedTextFrame(#"{"type":"subscribe","since":0}"#))
    }

    private func send(_ bytes: [UInt8]) throws {
        guard retryingInterrupted({ Glibc.send(socket, bytes, bytes.count, 0) }) == bytes.count else { throw POSIXError(.EIO) }
    }

    /// Client frames must be masked (RFC 6455 §5.3).
    static func maskedTextFrame(_ text: String) -> [UInt8] {
        let payload = Array(text.utf8)
        precondition(payload.count < 126)
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        return [0x81, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    }

    /// Reads server frames (unmasked, RFC 6455 §5.2) until `enough` says so or the socket
    /// has been quiet for `quiet`; returns their payloads.
    func readMessages(quiet: Duration = .seconds(10), until enough: ([Data]) -> Bool) throws -> [Data] {
        var timeout = timeval(tv_sec: Int(quiet.components.seconds), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var pending: [UInt8] = []
        var messages: [Data] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while !enough(messages) {
            let count = retryingInterrupted { recv(socket, &chunk, chunk.count, 0) }
            guard count > 0 else { break }
            pending += chunk[0..<count]
            while let (payload, used) = Self.frame(in: pending) {
                messages.append(Data(payload))
                pending.removeFirst(used)
            }
        }
        return messages
    }

    /// The first complete frame's payload and how many bytes it took, if there is one.
    static func frame(in bytes: [UInt8]) -> ([UInt8], Int)? {
        guard bytes.count >= 2 else { return nil }
        var length = Int(bytes[1] & 0x7F)
        var header = 2
        if length == 126 {
            guard bytes.count >= 4 else { return nil }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            header = 4
        } else if length == 127 {
            guard bytes.count >= 10 else { return nil }
            length = bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            header = 10
        }
        guard bytes.count >= header + length else { return nil }
        return (Array(bytes[header..<header + length]), header + length)
    }

    deinit { close(socket) }
}

@Suite("Slow consumers", .timeLimit(.minutes(4)))
struct SlowConsumerTests {
    @Test func aClientThatStopsReadingIsDroppedWhileWritesAndOtherSubscribersGoOn() async throws {
        let store = try CartStore.inMemory()
        try await withServer(
            {
                $0.ringSize = 256
                // The stalled client falls out of the ring only once the kernel's buffers of its
                // connection are full: thousands of writes, 20 s on a quiet machine and over a
                // minute in a loaded full run. The lease must not end it first.
                $0.leaseTTL = .seconds(600)
                $0.heartbeatInterval = .seconds(300)
            }, store: store
        ) { port, server in
            let stalled = try await StalledClient.connect(port: port)
            let reader = TestSubscriber(port: port)
            try await reader.subscribe(since: 0)
            await eventually("both subscribed") { server.hub.stats.subscribers == 2 }
            let name = String(repeating: "n", count: 200)
            var written = 0
            // Bounded: stop once the stalled client is dropped (or after 20 000 writes).
            while server.hub.stats.slowConsumerDrops == 0, written < 20_000 {
                try await store.addItem(cartID: "c\(written / 500)", sku: "s\(written % 500)", quantity: 1, unitPriceCents: 1, name: name)
                written += 1
                // The reader is one that keeps up: on a loaded machine this test's writes can
                // outrun it, so they wait whenever it is half the ring behind.
                if written - reader.events.count > 128 {
                    let target = written - 64
                    // A reader that cannot catch up has failed the test: stop writing.
                    guard await eventually(timeout: .seconds(30), "the reader to keep up", { reader.events.count >= target }) else { break }
                }
            }
            #expect(server.hub.stats.slowConsumerDrops == 1, "still connected after \(written) writes")
            #expect(server.hub.stats.subscribers == 1)
            // The writes never waited for it, and the reading subscriber has every one of them.
            await eventually("the reader to have all \(written)") { reader.events.count == written }
            #expect(reader.events.map(\.seq) == Array(1...Int64(written)))
            withExtendedLifetime(stalled) {}
            await reader.close()
        }
    }

    @Test func aClientThatPausesWithinTheLagLimitGetsEveryEventWhenItReadsAgain() async throws {
        let store = try CartStore.inMemory()
        try await withServer(
            {
                $0.ringSize = 5_000
                // The paused client sends no heartbeat, so its lease must outlast the whole test:
                // on a loaded machine the 2 000 writes took over a minute, and a 60 s lease ended
                // it as `leaseExpired` before it read (the lease is not this test's subject).
                $0.leaseTTL = .seconds(3_600)
                $0.heartbeatInterval = .seconds(30)
            }, store: store
        ) { port, server in
            let paused = try await StalledClient.connect(port: port)
            await eventually("caught up and live") { server.hub.stats.liveSubscribers == 1 }
            // About 800 KB of events while it does not read: many times the connection's
            // high-water mark (how the fan-out skips and resumes a full connection is tested
            // step by step in LiveFanoutTests), and far within the lag limit.
            let name = String(repeating: "n", count: 200)
            let written = 2_000
            for index in 0..<written {
                try await store.addItem(cartID: "c\(index / 100)", sku: "s\(index % 100)", quantity: 1, unitPriceCents: 1, name: name)
            }
            #expect(server.hub.stats.slowConsumerDrops == 0)
            let decoder = FanoutJSON.decoder()
            let messages = try await onThreadOfItsOwn {
                // Until every event has come (the welcome and the server's heartbeats come too: on
                // a loaded machine the test outlasts the 30 s heartbeat interval, and counting
                // messages stopped it two events short, one per heartbeat), or 30 s of quiet.
                var events = 0
                var counted = 0
                return try paused.readMessages(quiet: .seconds(30)) { messages in
                    for message in messages[counted...] {
                        if case .event = try? decoder.decode(ServerMessage.self, from: message) { events += 1 }
                    }
                    counted = messages.count
                    return events >= written
                }
            }
            let seqs = messages.compactMap { data -> Int64? in
                guard case .event(let event) = try? decoder.decode(ServerMessage.self, from: data) else { return nil }
                return event.seq
            }
            #expect(seqs == Array(1...Int64(written)), "\(server.hub.stats)")
            #expect(server.hub.stats.slowConsumerDrops == 0)
            #expect(server.hub.stats.liveSubscribers == 1)
        }
    }
}

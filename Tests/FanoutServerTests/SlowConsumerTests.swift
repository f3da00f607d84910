import CartStore
import Foundation
import FanoutTestSupport
import Testing
@testable import FanoutServer
#if canImport(Glibc)
import Glibc
#endif

/// A WebSocket client on a bare socket with a tiny receive buffer that subscribes and then
/// never reads: the slowest consumer there is.
final class StalledClient {
    let socket: Int32

    init(port: Int) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var size: Int32 = 2_048
        setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        try send(Array("""
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
            guard recv(socket, &byte, 1, 0) == 1 else { throw POSIXError(.ECONNRESET) }
            head.append(byte)
        }
        guard String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 101") else { throw POSIXError(.EPROTO) }
        try send(Self.maskedTextFrame(#"{"type":"subscribe","since":0}"#))
    }

    private func send(_ bytes: [UInt8]) throws {
        guard Glibc.send(socket, bytes, bytes.count, 0) == bytes.count else { throw POSIXError(.EIO) }
    }

    /// Client frames must be masked (RFC 6455 §5.3).
    static func maskedTextFrame(_ text: String) -> [UInt8] {
        let payload = Array(text.utf8)
        precondition(payload.count < 126)
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        return [0x81, 0x80 | UInt8(payload.count)] + mask + payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
    }

    deinit { close(socket) }
}

@Suite("Slow consumers", .timeLimit(.minutes(2)))
struct SlowConsumerTests {
    @Test func aClientThatStopsReadingIsDroppedWhileWritesAndOtherSubscribersGoOn() async throws {
        let store = try CartStore.inMemory()
        try await withServer({ $0.outboxLimit = 256; $0.leaseTTL = .seconds(60); $0.heartbeatInterval = .seconds(30) }, store: store) { port, server in
            let stalled = try StalledClient(port: port)
            let reader = TestSubscriber(port: port)
            try await reader.subscribe(since: 0)
            await eventually("both subscribed") { server.hub.stats.subscribers == 2 }
            let name = String(repeating: "n", count: 200)
            var written = 0
            // Bounded: stop once the stalled client is dropped (or after 20 000 writes).
            while server.hub.stats.slowConsumerDrops == 0, written < 20_000 {
                try await store.addItem(cartID: "c\(written / 500)", sku: "s\(written % 500)", quantity: 1, unitPriceCents: 1, name: name)
                written += 1
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
}

import FanoutTestSupport
import Foundation
import Testing

@testable import FanoutServer

#if canImport(Glibc)
    import Glibc
#endif

/// A client on a bare socket that sends whatever bytes it is given, as a broken or hostile
/// client would, and reads the answer until the server closes.
struct RawHTTP {
    struct Answer: Sendable {
        var text: String
        /// The server closed the connection (as opposed to the read timing out).
        var closed: Bool

        var status: Int? { text.hasPrefix("HTTP/1.1 ") ? Int(text.dropFirst(9).prefix(3)) : nil }
    }

    /// Sends `request` (then `body`, which may be large), and reads until the server closes or
    /// `timeout` passes with nothing read.
    static func exchange(port: Int, _ request: [UInt8], body: [UInt8] = [], timeout: Int = 30) async throws -> Answer {
        try await onThreadOfItsOwn {
            let socket = try connectedSocket(port: port) { socket in
                var time = timeval(tv_sec: timeout, tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
                setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
            }
            defer { close(socket) }
            for bytes in [request, body] where !bytes.isEmpty {
                // Sent whole before anything is read, as a simple client does.
                var offset = 0
                while offset < bytes.count {
                    let sent = retryingInterrupted {
                        bytes[offset...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    }
                    guard sent > 0 else { return Answer(text: "<send failed after \(offset) bytes>", closed: false) }
                    offset += sent
                }
            }
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let count = retryingInterrupted { recv(socket, &chunk, chunk.count, 0) }
                if count == 0 { return Answer(text: String(decoding: received, as: UTF8.self), closed: true) }
                if count < 0 { return Answer(text: String(decoding: received, as: UTF8.self), closed: errno == ECONNRESET) }
                received += chunk[0..<count]
            }
        }
    }
}

@Suite("Malformed and hostile HTTP", .timeLimit(.minutes(2)))
struct MalformedRequestTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let bytes: [UInt8]
        let status: Int
        let code: String
        var testDescription: String { name }

        init(_ name: String, _ request: String, _ status: Int, _ code: String) {
            self.name = name
            self.bytes = Array(request.utf8)
            self.status = status
            self.code = code
        }
    }

    static let cases: [Case] = [
        Case("unknown method", "FOO / HTTP/1.1\r\nHost: localhost\r\n\r\n", 405, "method_not_allowed"),
        Case(
            "Content-Length not a number", "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n", 400,
            "malformed_request"),
        Case(
            "conflicting Content-Length",
            "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", 400,
            "malformed_request"),
        Case(
            "huge header", "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: \(String(repeating: "a", count: 100_000))\r\n\r\n", 431,
            "headers_too_large"),
        Case("long URL", "GET /\(String(repeating: "a", count: 10_000)) HTTP/1.1\r\nHost: localhost\r\n\r\n", 414, "uri_too_long"),
        // Past NIO's 80 KiB head limit, still 414; bare LF is a malformed request, not a version.
        Case(
            "URL past the head's limit", "GET /\(String(repeating: "a", count: 130_000)) HTTP/1.1\r\nHost: localhost\r\n\r\n", 414,
            "uri_too_long"),
        Case("bare-LF line endings", "GET /healthz HTTP/1.1\nHost: localhost\n\n", 400, "malformed_request"),
        Case("NUL in the path", "GET /heal\u{0}thz HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "malformed_request"),
        Case("HTTP/0.9 request line", "GET /healthz\r\n\r\n", 505, "http_version_not_supported"),
        Case("HTTP/2.0 request line", "GET /healthz HTTP/2.0\r\nHost: localhost\r\n\r\n", 505, "http_version_not_supported"),
        Case(
            "malformed chunk size",
            "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
            400, "malformed_request"),
    ]

    @Test(arguments: cases)
    func aRequestThatCannotBeParsedIsAnsweredWithAJSONErrorAndClosed(_ bad: Case) async throws {
        try await withServer { port, _ in
            let answer = try await RawHTTP.exchange(port: port, bad.bytes)
            #expect(answer.status == bad.status, "\(answer.text.prefix(200))")
            #expect(answer.text.contains(#""code":"\#(bad.code)""#))
            #expect(answer.closed, "the connection must be closed, not left waiting")
        }
    }

    @Test func aTLSHelloIsAnsweredAndClosed() async throws {
        try await withServer { port, _ in
            let hello: [UInt8] = [0x16, 0x03, 0x01, 0x00, 0xA5, 0x01, 0x00, 0x00, 0xA1, 0x03, 0x03] + Array(repeating: 0, count: 100)
            let answer = try await RawHTTP.exchange(port: port, hello)
            #expect(answer.status != nil, "an HTTP answer, however useless to a TLS client")
            #expect(answer.closed)
        }
    }

    @Test func aTooLargeBodySentWholeUnderConnectionCloseStillGetsIts413() async throws {
        try await withServer { port, _ in
            let size = 8 * 1024 * 1024
            let head =
                "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: \(size)\r\n\r\n"
            let answer = try await RawHTTP.exchange(port: port, Array(head.utf8), body: Array(repeating: UInt8(ascii: " "), count: size))
            #expect(answer.status == 413, "\(answer.text.prefix(200))")
            #expect(answer.text.contains(#""code":"body_too_large""#))
            #expect(answer.closed)
        }
    }

    @Test func aConnectionThatSendsNoRequestIsClosed() async throws {
        try await withServer({ $0.firstRequestTimeout = .milliseconds(300) }) { port, _ in
            let silent = try await RawHTTP.exchange(port: port, [])
            #expect(silent.closed && silent.text.isEmpty)
            // A request head that never ends is no better.
            let trickle = try await RawHTTP.exchange(port: port, Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\n".utf8))
            #expect(trickle.closed)
        }
    }

    /// A body that trickles in (here, one byte and then nothing) is cut at the body's deadline
    /// with 408, instead of holding the connection for as long as the client likes.
    @Test func aBodyThatNeverArrivesWholeIsCut() async throws {
        try await withServer({ $0.bodyTimeout = .milliseconds(500) }) { port, _ in
            let head = "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            let answer = try await RawHTTP.exchange(port: port, Array(head.utf8))
            #expect(answer.status == 408, "\(answer.text.prefix(200))")
            #expect(answer.text.contains(#""code":"request_timeout""#))
            #expect(answer.closed)
            // A whole body in time is not affected, on the same server.
            let whole = #"{"sku":"x","quantity":1,"unitPriceCents":1}"#
            let request =
                "POST /carts/a/items HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: \(whole.utf8.count)\r\n\r\n\(whole)"
            #expect(try await RawHTTP.exchange(port: port, Array(request.utf8)).status == 200)
        }
    }

    @Test func idleConnectionsAtTheLimitAreClosedInTimeAndTheNextClientIsServed() async throws {
        try await withServer({
            $0.maxConnections = 8
            $0.firstRequestTimeout = .milliseconds(500)
        }) { port, _ in
            // Connections that never send a request hold every slot (and more wait behind them).
            let idle = try (0..<16).map { _ in try connectedSocket(port: port) }
            defer { for socket in idle { close(socket) } }
            // The next client waits in the backlog until the idle ones time out, then is served.
            let answer = try await RawHTTP.exchange(
                port: port, Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
            #expect(answer.status == 200, "\(answer.text.prefix(200))")
        }
    }
}

@Suite("HTTP methods", .timeLimit(.minutes(1)))
struct HTTPMethodTests {
    static func ask(_ method: String, _ path: String, port: Int) async throws -> RawHTTP.Answer {
        try await RawHTTP.exchange(
            port: port, Array("\(method) \(path) HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8))
    }

    @Test func headIsAnsweredWhereGetIsWithTheHeadersAndNoBody() async throws {
        try await withServer { port, _ in
            let head = try await Self.ask("HEAD", "/healthz", port: port)
            #expect(head.status == 200)
            #expect(head.text.contains("Content-Length: 15\r\n"), "the GET's length")
            #expect(head.text.hasSuffix("\r\n\r\n"), "no body: \(head.text)")
            #expect(try await Self.ask("HEAD", "/carts", port: port).status == 200)
        }
    }

    @Test func aKnownPathAskedWithAnotherMethodGets405WithAllow() async throws {
        try await withServer { port, _ in
            let put = try await Self.ask("PUT", "/carts", port: port)
            #expect(put.status == 405)
            #expect(put.text.contains("Allow: GET, HEAD\r\n"))
            #expect(put.text.contains(#""code":"method_not_allowed""#))
            let post = try await Self.ask("POST", "/carts/alice", port: port)
            #expect(post.status == 405)
            #expect(post.text.contains("Allow: DELETE, GET, HEAD\r\n"))
            #expect(try await Self.ask("GET", "/nowhere", port: port).status == 404)
        }
    }
}

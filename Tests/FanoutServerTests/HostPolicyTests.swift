import FanoutTestSupport
import Foundation
import Hummingbird
import Testing

@testable import FanoutServer

@Suite("Host names (DNS rebinding)", .timeLimit(.minutes(2)))
struct HostPolicyTests {
    static func get(_ path: String, host: String, port: Int, upgrade: Bool = false) async throws -> RawHTTP.Answer {
        var request = "GET \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n"
        if upgrade {
            request +=
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        }
        return try await RawHTTP.exchange(port: port, Array((request + "\r\n").utf8))
    }

    @Test func onLoopbackOnlyLoopbackNamesAndAllowedHostsAreAnswered() async throws {
        try await withServer({ $0.allowedHosts = ["carts.internal"] }) { port, _ in
            for host in ["localhost:\(port)", "127.0.0.1:\(port)", "[::1]:\(port)", "app.localhost", "CARTS.internal:\(port)"] {
                #expect(try await Self.get("/carts", host: host, port: port).status == 200, "Host: \(host)")
            }
            for host in ["evil.example", "evil.example:\(port)", "127.0.0.1.evil.example", "localhost.evil.example"] {
                let answer = try await Self.get("/carts", host: host, port: port)
                #expect(answer.status == 421, "Host: \(host)")
                #expect(answer.text.contains(#""code":"host_not_allowed""#))
            }
            let upgrade = try await Self.get("/subscribe", host: "evil.example", port: port, upgrade: true)
            #expect(upgrade.status == 421, "a WebSocket from a rebound name is refused too")
        }
    }

    @Test func listeningElsewhereAnyNameIsAnsweredUnlessHostsAreListed() {
        #expect(throws: Never.self) { try HostPolicy(listeningOn: "0.0.0.0", allowedHosts: []).check(.init(host: "anything.example")) }
        let listed = HostPolicy(listeningOn: "0.0.0.0", allowedHosts: ["carts.example"])
        #expect(throws: APIError.self) { try listed.check(.init(host: "other.example")) }
        #expect(throws: Never.self) { try listed.check(.init(host: "carts.example:8080")) }
    }
}

extension Request {
    /// A GET with only a `Host`, for policy checks.
    init(host: String) {
        self.init(head: .init(method: .get, scheme: "http", authority: host, path: "/carts"), body: .init(buffer: .init()))
    }
}

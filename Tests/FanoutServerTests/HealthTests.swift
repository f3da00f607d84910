import CartStore
import FanoutTestSupport
import Foundation
import Testing

@testable import FanoutServer

/// `/healthz` says what a write would meet now: a load balancer takes out a node that cannot
/// write, and puts it back once it can.
@Suite("Health", .serialized, .timeLimit(.minutes(2)))
struct HealthTests {
    static func send(_ port: Int, _ method: String, _ path: String, body: String = "") async throws -> RawHTTP.Answer {
        let request =
            "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        return try await RawHTTP.exchange(port: port, Array(request.utf8))
    }

    /// It said `{"status":"ok"}` while every write was refused with 507 on a disk the writes
    /// themselves had filled. The log says when the disk filled, and when it takes changes
    /// again (once room is freed), with how long it was full.
    @Test(.needsSmallDisk) func aFullDiskIs507AtHealthzWhileWritesAre() async throws {
        let disk = try SmallDisk(bytes: 2 * 1024 * 1024)
        defer { disk.unmount() }
        let store = try CartStore(path: disk.path("store.sqlite"))
        defer { try? store.close() }
        // Half a MiB left for the store to fill by itself (the filler takes nothing back): the
        // same full disk in a few hundred writes rather than thousands.
        try disk.fill()
        try disk.free(512 * 1024)
        let log = RecentLogLines()
        try await withServer(store: store, logger: log.logger()) { port, _ in
            var refused = 0
            for index in 0..<20_000 where refused < 10 {
                let body = #"{"sku":"s\#(index % 500)","quantity":1,"unitPriceCents":1,"name":"\#(String(repeating: "n", count: 150))"}"#
                let answer = try await Self.send(port, "POST", "/carts/c\(index % 20)/items", body: body)
                if answer.status == 507 {
                    refused += 1
                    let health = try await Self.send(port, "GET", "/healthz")
                    #expect(health.status == 507, "health said \(health.status) while writes were refused")
                    #expect(health.text.contains("storage_full"))
                } else {
                    #expect(answer.status == 200)
                    refused = 0
                }
            }
            #expect(refused == 10, "the writes should have filled the disk")
            #expect(await eventually("the log to say the disk is full") { log.text.contains("disk full") }, "\(log.text)")
            #expect(!log.text.contains("disk writable again"))
            // Room again: the watch's probe finds it, and a change goes through.
            try disk.free(1024 * 1024)
            #expect(
                await eventually("the log to say the disk takes changes again") { log.text.contains("disk writable again") },
                "\(log.text)")
            #expect(log.text.contains("fanout.full_s="))
            let after = try await Self.send(port, "POST", "/carts/after/items", body: #"{"sku":"s","quantity":1,"unitPriceCents":1}"#)
            #expect(after.status == 200)
        }
    }
}

import CartStore
import FanoutProtocol
import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import FanoutServer

/// `GET /metrics` as an operator's Prometheus sees it: each figure moves when what it counts
/// happens, and each application counts only its own traffic.
@Suite("Metrics")
struct MetricsTests {
    static func app(_ configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> FanoutServerApp {
        try await HTTPAPITests.app { configuration in
            configuration.heartbeatInterval = .milliseconds(200)
            configuration.leaseTTL = .seconds(1)
            configure(&configuration)
        }
    }

    /// The value of the sample `name` whose labels include `labels`, from `/metrics`.
    static func sample(_ name: String, _ labels: [String: String] = [:], in client: some TestClientProtocol) async throws -> Double? {
        try await client.execute(uri: "/metrics", method: .get) { response in
            #expect(response.status == .ok)
            #expect(response.headers[.contentType]?.hasPrefix("text/plain") == true)
            return Exposition(String(buffer: response.body)).value(name, labels)
        }
    }

    static let addApple = ByteBuffer(string: #"{"sku":"apple","quantity":1,"unitPriceCents":50}"#)

    /// The build and the process in the standard names (`fanout_build_info`, `process_*`), each
    /// with its `# HELP`, read at each scrape.
    @Test func theBuildAndTheProcessAreExportedInTheStandardNames() async throws {
        try await Self.app().application.test(.router) { client in
            #expect(try await Self.sample("fanout_build_info", ["version": FanoutVersion.current], in: client) == 1)
            let resident = try #require(try await Self.sample("process_resident_memory_bytes", in: client))
            #expect(resident > 1_000_000, "a Swift server takes more than a megabyte: \(resident)")
            let openBefore = try #require(try await Self.sample("process_open_fds", in: client))
            var limit = rlimit()
            _ = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            #expect(try await Self.sample("process_max_fds", in: client) == Double(limit.rlim_cur))
            let started = try #require(try await Self.sample("process_start_time_seconds", in: client))
            #expect(started <= Date().timeIntervalSince1970 && started > Date().timeIntervalSince1970 - 86_400 * 7)
            #expect(try await Self.sample("process_cpu_seconds_total", in: client) ?? 0 > 0)
            // The whole test process's descriptors (other tests open and close theirs meanwhile).
            #expect(openBefore >= 3 && openBefore <= Double(limit.rlim_cur), "\(openBefore)")
            let text = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            for family in ["fanout_build_info", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"] {
                #expect(text.contains("# HELP \(family) "), "\(family) has its HELP")
            }
            #expect(text.contains("# TYPE process_cpu_seconds_total counter"))
        }
    }

    @Test func aMutationCountsOneEventCommittedAndItsLatency() async throws {
        try await Self.app().application.test(.router) { client in
            #expect(try await Self.sample("fanout_events_fanned_out_total", in: client) == 0)
            try await client.execute(uri: "/carts/alice/items", method: .post, body: Self.addApple) { #expect($0.status == .ok) }
            #expect(try await Self.sample("fanout_events_fanned_out_total", in: client) == 1)
            #expect(try await Self.sample("fanout_deliveries_total", in: client) == 0, "nobody subscribed")
            // Answered, so nothing is left queued for the writer (GroupCommitTests hold it).
            #expect(try await Self.sample("fanout_changes_waiting", in: client) == 0)
            let timed = ["route": "/carts/{cartID}/items", "method": "POST", "status": "200"]
            #expect(try await Self.sample("fanout_mutation_duration_seconds_count", timed, in: client) == 1)
            #expect(try await Self.sample("fanout_mutation_duration_seconds_sum", timed, in: client) ?? 0 > 0)
            // Reads are not mutations: no series for them.
            try await client.execute(uri: "/carts/alice", method: .get) { #expect($0.status == .ok) }
            #expect(try await Self.sample("fanout_mutation_duration_seconds_count", ["method": "GET"], in: client) == nil)
        }
    }

    @Test func storeErrorsAreCountedByTheirCode() async throws {
        try await Self.app().application.test(.router) { client in
            try await client.execute(
                uri: "/carts/alice/items", method: .post,
                body: ByteBuffer(string: #"{"sku":"a b","quantity":1,"unitPriceCents":1}"#)
            ) { #expect($0.status == .unprocessableContent) }
            try await client.execute(uri: "/carts/ghost", method: .delete) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/carts/ghost", method: .delete) { #expect($0.status == .notFound) }
            #expect(try await Self.sample("fanout_store_errors_total", ["code": "invalid_sku"], in: client) == 1)
            #expect(try await Self.sample("fanout_store_errors_total", ["code": "cart_not_found"], in: client) == 2)
            // A failed mutation is timed under its status.
            let timed = ["route": "/carts/{cartID}", "method": "DELETE", "status": "404"]
            #expect(try await Self.sample("fanout_mutation_duration_seconds_count", timed, in: client) == 2)
            // Errors that are not the store's (a route that does not exist) are not store errors.
            try await client.execute(uri: "/nowhere", method: .get) { #expect($0.status == .notFound) }
            #expect(try await Self.sample("fanout_store_errors_total", ["code": "not_found"], in: client) == nil)
        }
    }

    @Test func subscribersAreCountedByStateAndTheirEndsByReason() async throws {
        // A lease a loaded machine cannot starve the heartbeats out of before the write below
        // (it lapsed once in a full run at 1 s), short enough to wait for its expiry.
        let server = try await Self.app { $0.leaseTTL = .seconds(3) }
        try await server.application.test(.live) { client in
            let port = try #require(client.port)
            let websocket = ["transport": "websocket"]
            func subscribers(_ state: String) async throws -> Double? {
                try await Self.sample("fanout_subscribers", websocket.merging(["state": state]) { $1 }, in: client)
            }
            #expect(try await subscribers("live") == 0)
            #expect(
                try await Self.sample("fanout_subscriber_ends_total", websocket.merging(["reason": "leaseExpired"]) { $1 }, in: client) == 0
            )

            let silent = TestSubscriber(port: port)
            await eventually("connected") { (try? await subscribers("connected")) == 1 }
            try await silent.subscribe()
            await eventually("live") { (try? await subscribers("live")) == 1 }
            #expect(try await subscribers("connected") == 0)
            #expect(try await subscribers("catching_up") == 0)

            try await client.execute(uri: "/carts/alice/items", method: .post, body: Self.addApple) { #expect($0.status == .ok) }
            #expect(try await Self.sample("fanout_deliveries_total", in: client) == 1)

            silent.stopHeartbeats()
            _ = try await silent.closeFrame()
            await eventually("the expiry counted") {
                (try? await Self.sample("fanout_subscriber_ends_total", websocket.merging(["reason": "leaseExpired"]) { $1 }, in: client))
                    == 1
            }
            #expect(try await subscribers("live") == 0)
            #expect(
                try await Self.sample("fanout_subscriber_ends_total", websocket.merging(["reason": "peerClosed"]) { $1 }, in: client) == 0)
        }
    }

    @Test func eachApplicationCountsOnlyItsOwnTraffic() async throws {
        let first = try await Self.app()
        let second = try await Self.app()
        try await first.application.test(.router) { client in
            try await client.execute(uri: "/carts/alice/items", method: .post, body: Self.addApple) { #expect($0.status == .ok) }
            #expect(try await Self.sample("fanout_events_fanned_out_total", in: client) == 1)
        }
        try await second.application.test(.router) { client in
            let committed = try await Self.sample("fanout_events_fanned_out_total", in: client)
            #expect(committed == 0)
        }
    }

    /// Every family has its `# HELP`, the swift-metrics ones (made as traffic comes) too; every
    /// refused request is counted by its code, the store's codes also among store errors.
    @Test func everyFamilyIsDescribedAndRefusalsAreCountedByCode() async throws {
        try await Self.app().application.test(.router) { client in
            try await client.execute(uri: "/carts/alice/items", method: .post, body: Self.addApple) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts/ghost", method: .delete) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/nowhere", method: .get) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "https://evil.example"]) {
                #expect($0.status == .forbidden)
            }
            #expect(try await Self.sample("fanout_requests_refused_total", ["code": "cart_not_found"], in: client) == 1)
            #expect(try await Self.sample("fanout_requests_refused_total", ["code": "not_found"], in: client) == 1)
            #expect(try await Self.sample("fanout_requests_refused_total", ["code": "origin_not_allowed"], in: client) == 1)
            #expect(try await Self.sample("fanout_store_errors_total", ["code": "cart_not_found"], in: client) == 1)
            #expect(try await Self.sample("fanout_events_behind", in: client) == 0, "SQLite: every commit delivered")
            #expect(try await Self.sample("fanout_presence_members", ["held": "here"], in: client) == 0)
            let text = try await client.execute(uri: "/metrics", method: .get) { String(buffer: $0.body) }
            let typed = text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { $0.split(separator: " ")[2] }
            #expect(typed.count >= 15, "\(typed)")
            for family in typed {
                let help = text.split(separator: "\n").first { $0.hasPrefix("# HELP \(family) ") }
                #expect(help.map { $0.count > "# HELP \(family) ".count + 10 } == true, "\(family) has no HELP worth the name")
            }
        }
    }

    /// The gauges read at each scrape: the presence members this server holds, and the
    /// idempotency keys kept (counted by the pruner after each round).
    @Test func presenceMembersAndIdempotencyKeysAreGauged() async throws {
        let server = try await Self.app { $0.idempotencyKeysTTL = .seconds(10) }
        try await server.application.test(.live) { client in
            let port = try #require(client.port)
            let member = TestSubscriber(port: port)
            try await member.subscribe(carts: ["alice"], presence: PresenceRequest(key: "tab-1", state: [:]))
            await eventually("the member counted") {
                (try? await Self.sample("fanout_presence_members", ["held": "here"], in: client)) == 1
            }
            #expect(try await Self.sample("fanout_presence_members", ["held": "elsewhere"], in: client) == 0)
            try await client.execute(
                uri: "/carts/alice/items", method: .post, headers: [HTTPField.Name("Idempotency-Key")!: "k-1"], body: Self.addApple
            ) { #expect($0.status == .ok) }
            // The pruner counts every second with a 10 s time to live.
            await eventually("the key counted") { (try? await Self.sample("fanout_idempotency_keys", in: client)) == 1 }
            await member.close()
            await eventually("the member gone") { (try? await Self.sample("fanout_presence_members", ["held": "here"], in: client)) == 0 }
        }
    }

    /// `/metrics` is behind the same access middleware as every route: a browser page from a
    /// foreign origin cannot read it.
    @Test func metricsAreRefusedToAForeignBrowserOrigin() async throws {
        try await Self.app().application.test(.router) { client in
            try await client.execute(uri: "/metrics", method: .get, headers: [.origin: "https://evil.example"]) { response in
                #expect(response.status == .forbidden)
                #expect(HTTPAPITests.errorCode(response.body) == "origin_not_allowed")
            }
        }
    }
}

/// A Prometheus text exposition, read back: `name{label="value",…} number` lines.
struct Exposition {
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    let samples: [Sample]

    init(_ text: String) {
        samples = text.split(separator: "\n").compactMap { line -> Sample? in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                return nil
            }
            let series = line[..<space]
            guard let brace = series.firstIndex(of: "{") else {
                return Sample(name: String(series), labels: [:], value: value)
            }
            var labels: [String: String] = [:]
            // Label values here never hold `",` or `=`, so a plain split reads them.
            for pair in series[series.index(after: brace)..<series.index(before: series.endIndex)].split(separator: "\",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                labels[String(parts[0])] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            return Sample(name: String(series[..<brace]), labels: labels, value: value)
        }
    }

    /// The one sample of `name` whose labels include `labels`; nil if none (or several) match.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        let matching = samples.filter { sample in
            sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value }
        }
        return matching.count == 1 ? matching[0].value : nil
    }
}

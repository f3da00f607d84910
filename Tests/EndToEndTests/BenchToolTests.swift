import FanoutTestSupport
import Foundation
import Testing

/// `fanout-bench` (benchmarks/FanoutBench) against a real server: what compare.sh relies on.
@Suite("Bench tool", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct BenchToolTests {
    @Test(arguments: ["websocket", "sse"])
    func benchCountsEveryDeliveryAgainstARealServer(transport: String) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try ServerProcess(arguments: ["--port", "0", "--db", database])
        let bench = try await runToExit(
            "fanout-bench",
            [
                "--url", "http://127.0.0.1:\(server.port)", "--subscribers", "3", "--events", "20",
                "--writers", "2", "--transport", transport, "--server-pid", "\(server.process.processIdentifier)",
            ], timeout: .seconds(60))
        #expect(bench.status == 0, "stderr: \(bench.standardError)")
        let data = Data(bench.standardOutput.utf8)
        let report = try #require((try JSONSerialization.jsonObject(with: data)) as? [String: Any])
        #expect(report["transport"] as? String == transport)
        #expect(report["connected"] as? Int == 3)
        #expect(report["acknowledged"] as? Int == 20)
        #expect(report["deliveries"] as? Int == 60)
        #expect(report["lost"] as? Int == 0)
        #expect(report["duplicated"] as? Int == 0)
        let latency = try #require(report["latencyMs"] as? [String: Any])
        #expect((latency["p50"] as? Double ?? -1) >= 0)
        #expect((report["serverCpuSeconds"] as? Double ?? -1) >= 0, "CPU read from /proc")
        #expect((report["serverRssKiB"] as? Int ?? 0) > 0, "RSS read from /proc")
        server.signal(SIGTERM)
    }

    @Test func theClientCarriesNoBenchmark() async throws {
        let bench = try await CartCommandTests.client(["bench", "--subscribers", "1"])
        #expect(bench.status != 0, "fanout-client bench is now fanout-bench")
        let help = try await CartCommandTests.client(["--help"])
        #expect(!help.output.contains("bench"))
    }
}

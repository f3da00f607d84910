import FanoutTestSupport
import Foundation
import Testing

/// `fanout-bench` (benchmarks/FanoutBench) against a real server: what compare.sh relies on.
@Suite("Bench tool", .timeLimit(.minutes(2)))
struct BenchToolTests {
    @Test func benchCountsEveryDeliveryAgainstARealServer() async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try ServerProcess(arguments: ["--port", "0", "--db", database])
        let bench = Process()
        bench.executableURL = ServerProcess.executable("fanout-bench")
        bench.arguments = ["--url", "http://127.0.0.1:\(server.port)", "--subscribers", "3", "--events", "20",
                           "--writers", "2", "--server-pid", "\(server.process.processIdentifier)"]
        let output = Pipe()
        bench.standardOutput = output
        bench.standardError = FileHandle.nullDevice
        try bench.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        bench.waitUntilExit()
        #expect(bench.terminationStatus == 0)
        let report = try #require((try JSONSerialization.jsonObject(with: data)) as? [String: Any])
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

    @Test func theClientCarriesNoBenchmark() throws {
        let bench = try CartCommandTests.client(["bench", "--help"])
        #expect(bench.status != 0, "fanout-client bench is now fanout-bench")
        #expect(!(try CartCommandTests.client(["--help"]).output.contains("bench")))
    }
}

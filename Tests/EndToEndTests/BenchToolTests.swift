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
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
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

    /// crowd.sh's split: a listening process measures its subscribers' receipts of the writes
    /// another process made, handed over in a file; the writer waits for the listener's result.
    @Test func aListeningProcessCountsTheWritesAnotherProcessMade() async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("fanout-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (ready, writes, result) = (
            folder.appendingPathComponent("ready").path, folder.appendingPathComponent("writes").path,
            folder.appendingPathComponent("listener.json").path
        )
        let url = "http://127.0.0.1:\(server.port)"
        let serverPID = "\(server.process.processIdentifier)"
        async let listening = runToExit(
            "fanout-bench",
            [
                "--url", url, "--subscribers", "3", "--events", "0", "--ready-file", ready, "--writes-file", writes, "--listen-timeout",
                "60",
            ],
            timeout: .seconds(90))
        await eventually(timeout: .seconds(60), "the listener's subscribers connected") {
            FileManager.default.fileExists(atPath: ready)
        }
        #expect(try String(contentsOfFile: ready, encoding: .utf8) == "3\n")
        async let writing = runToExit(
            "fanout-bench",
            [
                "--url", url, "--subscribers", "2", "--events", "12", "--writers", "2", "--writes-file", writes,
                "--await-file", result, "--server-pid", serverPID,
            ], timeout: .seconds(90))
        let listener = try await listening
        #expect(listener.status == 0, "stderr: \(listener.standardError)")
        // The writer waits for the listener's result, as crowd.sh writes it once complete.
        try Data(listener.standardOutput.utf8).write(to: URL(fileURLWithPath: result))
        let writer = try await writing
        #expect(writer.status == 0, "stderr: \(writer.standardError)")

        let heard = try #require(try JSONSerialization.jsonObject(with: Data(listener.standardOutput.utf8)) as? [String: Any])
        #expect(heard["acknowledged"] as? Int == 12, "the writes of the other process")
        #expect(heard["deliveries"] as? Int == 36)
        #expect(heard["lost"] as? Int == 0)
        #expect(heard["duplicated"] as? Int == 0)
        let latency = try #require(heard["latencyMs"] as? [String: Any])
        let slowest = try #require(latency["max"] as? Double)
        #expect(slowest >= 0 && slowest < 60_000, "measured on one clock across the processes: \(slowest) ms")
        let wrote = try #require(try JSONSerialization.jsonObject(with: Data(writer.standardOutput.utf8)) as? [String: Any])
        #expect(wrote["deliveries"] as? Int == 24)
        #expect(wrote["lost"] as? Int == 0)
        server.signal(SIGTERM)
    }

    @Test func theClientCarriesNoBenchmark() async throws {
        let bench = try await CartCommandTests.client(["bench", "--subscribers", "1"])
        #expect(bench.status != 0, "fanout-client bench is now fanout-bench")
        let help = try await CartCommandTests.client(["--help"])
        #expect(!help.output.contains("bench"))
    }
}

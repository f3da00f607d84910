import FanoutTestSupport
import Foundation
import Testing

@testable import CartStore

@Suite("Crash survival", .tags(.processes), .outsideTheFastSet)
struct CrashSurvivalTests {
    /// The helper executable, built next to the test bundle.
    static var writerExecutable: URL {
        let buildDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return buildDirectory.appending(path: "cartstore-crash-writer")
    }

    /// Starts the writer on the store at `path`; its acknowledgements (`seq cart sku`, a line
    /// each, once the mutation returned) come in order, and end when it does.
    static func startWriter(_ path: String) async throws -> (ChildProcess, AsyncStream<String>) {
        // Each kept until read: the test reads a few hundred, then kills the writer.
        let (lines, line) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingOldest(100_000))
        let process = try await ChildProcess(writerExecutable, [path], onOutputLine: { line.yield($0) }, onExit: { _ in line.finish() })
        return (process, lines)
    }

    @Test func everyReturnedMutationSurvivesKillDashNine() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        var acknowledged: [(seq: Int64, cartID: String, sku: String)] = []

        for round in 0..<3 {
            let (process, output) = try await Self.startWriter(path)

            // Read acknowledgements until a few hundred mutations returned, then kill mid-write.
            let target = 150 + round * 50
            var lines: [(seq: Int64, cartID: String, sku: String)] = []
            for await line in output {  // ends if the writer died on its own
                let fields = line.split(separator: " ")
                lines.append((Int64(fields[0])!, String(fields[1]), String(fields[2])))
                if lines.count >= target { break }
            }
            acknowledged += lines
            let seen = lines.count
            #expect(seen >= target, "writer stopped early in round \(round)")
            process.signal(SIGKILL)
            #expect(await process.exitStatus() == SIGKILL, "the status is the signal that ended it")
        }

        let store = try CartStore(path: path)
        let log = try await wholeLog(store)
        let seqs = Set(log.map(\.seq))
        for ack in acknowledged {
            #expect(seqs.contains(ack.seq), "acknowledged seq \(ack.seq) was lost")
        }
        // Whatever committed (acknowledged or not yet) is consistent: no gaps, log == tables.
        #expect(log.map(\.seq) == Array(1...Int64(log.count)))
        #expect(fold(log) == (try await store.carts()))
        // The restarted writers continued the same sequence.
        #expect(acknowledged.map(\.seq) == acknowledged.map(\.seq).sorted())
    }
}

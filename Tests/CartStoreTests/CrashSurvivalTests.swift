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

    /// Starts the writer on the store at `path`; its acknowledgements come on the pipe.
    static func startWriter(_ path: String) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = writerExecutable
        process.arguments = [path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        return (process, output)
    }

    @Test func everyReturnedMutationSurvivesKillDashNine() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        var acknowledged: [(seq: Int64, cartID: String, sku: String)] = []

        for round in 0..<3 {
            let (process, output) = try Self.startWriter(path)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

            // Read acknowledgements until a few hundred mutations returned, then kill mid-write;
            // on a thread of its own, as the reads block while the writer works.
            let target = 150 + round * 50
            let handle = output.fileHandleForReading
            let lines = try await onThreadOfItsOwn { () -> [(seq: Int64, cartID: String, sku: String)] in
                var lines: [(seq: Int64, cartID: String, sku: String)] = []
                var buffer = Data()
                while lines.count < target {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }  // writer died on its own
                    buffer.append(chunk)
                    while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                        let fields = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self).split(separator: " ")
                        buffer.removeSubrange(buffer.startIndex...newline)
                        lines.append((Int64(fields[0])!, String(fields[1]), String(fields[2])))
                    }
                }
                return lines
            }
            acknowledged += lines
            let seen = lines.count
            #expect(seen >= target, "writer stopped early in round \(round)")
            kill(process.processIdentifier, SIGKILL)
            // Not `waitUntilExit` (it blocks a thread of the pool, and on Linux has spun on an exit
            // Foundation missed): the status, which is the signal that ended it.
            #expect(await exitStatus(of: process) == SIGKILL)
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

import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A `fanout-client subscribe --format json` process, its output parsed line by line.
final class SubscribeProcess: Sendable {
    struct Line: Sendable {
        var type: String
        var seq: Int64
        /// For a snapshot part: how many carts it carries, and whether more parts follow.
        var carts = 0
        var more = false
        /// For an event made with an `Idempotency-Key`: the key.
        var idempotencyKey: String?
    }

    /// What the pipe's handler and the test share.
    private final class Output: Sendable {
        let lines = NIOLockedValueBox<[Line]>([])
        let partial = NIOLockedValueBox(Data())
    }

    let process: Process
    private let shared = Output()

    init(port: Int, arguments: [String] = []) throws {
        let process = Process()
        process.executableURL = ServerProcess.executable("fanout-client")
        process.arguments = ["subscribe", "--url", "ws://127.0.0.1:\(port)/subscribe", "--format", "json"] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        self.process = process
        output.fileHandleForReading.readabilityHandler = { [shared] handle in
            let chunk = handle.availableData
            let complete: [Data] = shared.partial.withLockedValue { buffer in
                buffer.append(chunk)
                var complete: [Data] = []
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    complete.append(buffer[buffer.startIndex..<newline])
                    buffer.removeSubrange(buffer.startIndex...newline)
                }
                return complete
            }
            let parsed = complete.compactMap { data -> Line? in
                guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
                    let type = object["type"] as? String, let seq = (object["seq"] as? NSNumber)?.int64Value
                else { return nil }
                return Line(
                    type: type, seq: seq, carts: (object["carts"] as? [Any])?.count ?? 0, more: object["more"] as? Bool ?? false,
                    idempotencyKey: object["idempotencyKey"] as? String)
            }
            shared.lines.withLockedValue { $0 += parsed }
        }
        try process.run()
    }

    var output: [Line] { shared.lines.withLockedValue { $0 } }
    var eventSeqs: [Int64] { output.filter { $0.type == "event" }.map(\.seq) }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits (30 s at most) for it to exit; false if it did not (it is then killed).
    func waitForExit(timeout: Duration = .seconds(30)) async -> Bool {
        await exitCode(timeout: timeout) != nil
    }

    /// Its exit status once it has exited (`exitStatus(of:within:)`); nil if it did not within
    /// `timeout` (it is then killed).
    func exitCode(timeout: Duration = .seconds(30)) async -> Int32? {
        await exitStatus(of: process, within: timeout)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }
}

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

    let process: ChildProcess
    private let lines: NIOLockedValueBox<[Line]>

    /// - Parameter scheme: `ws`, or `wss` for a server with TLS (with `--cacert` in `arguments`):
    ///   given as the server's address, `http://` or `https://` (the one `--url` of both commands).
    init(port: Int, scheme: String = "ws", arguments: [String] = []) async throws {
        let lines = NIOLockedValueBox<[Line]>([])
        self.lines = lines
        process = try await ChildProcess(
            ServerProcess.executable("fanout-client"),
            ["subscribe", "--url", "\(scheme == "wss" ? "https" : "http")://127.0.0.1:\(port)", "--format", "json"] + arguments,
            onOutputLine: { text in
                guard let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any],
                    let type = object["type"] as? String, let seq = (object["seq"] as? NSNumber)?.int64Value
                else { return }
                let line = Line(
                    type: type, seq: seq, carts: (object["carts"] as? [Any])?.count ?? 0, more: object["more"] as? Bool ?? false,
                    idempotencyKey: object["idempotencyKey"] as? String)
                lines.withLockedValue { $0.append(line) }
            })
    }

    /// `count` clients with the same arguments, started one after another.
    static func start(_ count: Int, port: Int, arguments: [String] = []) async throws -> [SubscribeProcess] {
        var clients: [SubscribeProcess] = []
        for _ in 0..<count { clients.append(try await SubscribeProcess(port: port, arguments: arguments)) }
        return clients
    }

    var output: [Line] { lines.withLockedValue { $0 } }
    var eventSeqs: [Int64] { output.filter { $0.type == "event" }.map(\.seq) }

    func signal(_ signal: Int32) { process.signal(signal) }

    /// Waits (30 s at most) for it to exit; false if it did not (it is then killed).
    func waitForExit(timeout: Duration = .seconds(30)) async -> Bool {
        await exitCode(timeout: timeout) != nil
    }

    /// Its exit status once it has exited; nil if it did not within `timeout` (it is then
    /// killed).
    func exitCode(timeout: Duration = .seconds(30)) async -> Int32? {
        await process.exitStatus(within: timeout)
    }
}

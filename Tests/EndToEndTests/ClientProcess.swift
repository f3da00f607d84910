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
                return Line(type: type, seq: seq, carts: (object["carts"] as? [Any])?.count ?? 0, more: object["more"] as? Bool ?? false)
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
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if kill(process.processIdentifier, 0) != 0, errno == ESRCH { return false }
            if ContinuousClock.now >= deadline || Task.isCancelled {
                kill(process.processIdentifier, SIGKILL)
                return false
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }
}

/// A writer of mutations over HTTP.
enum Mutations {
    /// Adds a line; returns the event seq on a 2xx, nil otherwise (server down, refused).
    static func add(port: Int, cart: String, sku: String) async -> Int64? {
        await send(port: port, "POST", "/carts/\(cart)/items", body: #"{"sku":"\#(sku)","quantity":1,"unitPriceCents":10}"#)
    }

    /// Sends a change, with the bearer `token` when given; returns the event seq on a 2xx, nil
    /// otherwise (server down, refused).
    static func send(port: Int, _ method: String, _ path: String, body: String? = nil, token: String? = nil) async -> Int64? {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = 5
        request.httpBody = body.map { Data($0.utf8) }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        guard let (data, response) = try? await URLSession.shared.data(for: request),
            let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { return nil }
        return (object["seq"] as? NSNumber)?.int64Value
    }

    /// `writers` concurrent writers, `each` mutations each; returns the seqs that got a 2xx.
    static func burst(port: @escaping @Sendable () -> Int, writers: Int, each: Int, tag: String) async -> [Int64] {
        await withTaskGroup(of: [Int64].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    var acknowledged: [Int64] = []
                    for index in 0..<each {
                        if let seq = await add(port: port(), cart: "\(tag)\(writer)", sku: "s\(index)") { acknowledged.append(seq) }
                    }
                    return acknowledged
                }
            }
            var all: [Int64] = []
            for await part in group { all += part }
            return all.sorted()
        }
    }

    /// Every event seq in the log, through `GET /events`.
    static func log(port: Int) async throws -> [Int64] {
        var seqs: [Int64] = []
        while true {
            let url = URL(string: "http://127.0.0.1:\(port)/events?since=\(seqs.last ?? 0)&limit=1000")!
            let (data, _) = try await URLSession.shared.data(from: url)
            let object = (try JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
            let page = (object["events"] as? [[String: Any]] ?? []).compactMap { ($0["seq"] as? NSNumber)?.int64Value }
            if page.isEmpty { return seqs }
            seqs += page
        }
    }
}

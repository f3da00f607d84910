import CartStore
import Foundation
import NIOConcurrencyHelpers
import NIOPosix
import Testing

/// Waits until `condition` holds, polling, or records a failure after `timeout`: the tests'
/// way to wait for something asynchronous without sleeping a guessed time. The default bound is
/// generous (30 s): a condition that holds returns at once, and on two cores shared by the whole
/// suite's servers and PostgreSQL, connecting and catching up took more than 10 s now and then.
@discardableResult
public func eventually(
    timeout: Duration = .seconds(30), _ what: String,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    try await eventually(timeout: timeout, what, explaining: { "" }, sourceLocation: sourceLocation, condition)
}

/// `eventually`, and when the wait runs out, what each party was doing then (`explaining`:
/// the client's state, the server's figures and log), in the failure: a wait that ran out on a
/// loaded machine must say whether something was stuck or only slow.
@discardableResult
public func eventually(
    timeout: Duration = .seconds(30), _ what: String, explaining: () async -> String,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    // 5 ms at first, doubling to 100 ms: a condition that holds soon is seen soon, and the
    // dozens of waits a full run has open at once do not keep Swift concurrency's two threads
    // busy polling (at 5 ms each, they delayed every other test's tasks: a client's 20 writes
    // took over 30 s in the full suite and under a second alone).
    var pause = Duration.milliseconds(5)
    while ContinuousClock.now < deadline, !Task.isCancelled {
        if try await condition() { return true }
        try? await Task.sleep(for: pause)
        pause = min(pause * 2, .milliseconds(100))
    }
    let explanation = await explaining()
    Issue.record(
        "timed out waiting for \(what)\(explanation.isEmpty ? "" : "\n" + explanation)", sourceLocation: sourceLocation)
    return false
}

/// The last `lines` lines of `text` (a process's log).
public func tail(_ text: String, lines: Int = 20) -> String {
    text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
}

/// `writers` concurrent tasks, each adding `perWriter` lines to its own cart `w<N>`.
public func writeConcurrently(to store: CartStore, writers: Int, perWriter: Int) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for writer in 0..<writers {
            group.addTask {
                for index in 0..<perWriter {
                    try await store.addItem(cartID: "w\(writer)", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
                }
            }
        }
        try await group.waitForAll()
    }
}

/// The event loops of the tests' in-process servers: theirs alone, apart from the singleton that
/// the clients in this process (FanoutClient, WebSocket and HTTP test clients, PostgresNIO) use,
/// so that one test's burst through its server never queues another test's client behind it.
public let inProcessServerLoops = MultiThreadedEventLoopGroup(numberOfThreads: 2)

/// The real `fanout-server` executable, started as a process on port 0.
public final class ServerProcess: Sendable {
    /// A product executable: from the folder `FANOUT_PRODUCTS` names (`./scripts/test-release` points it
    /// at the release build for its second pass), else the one built next to the test bundle.
    public static func executable(_ name: String) -> URL {
        let folder =
            ProcessInfo.processInfo.environment["FANOUT_PRODUCTS"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return folder.appending(path: name)
    }

    public let process: ChildProcess
    public let port: Int
    /// `http`, or `https` for a server given `--tls-cert`.
    public let scheme: String

    /// Starts it and waits for the line that says where it listens.
    ///
    /// - Parameter openFilesLimit: started under this limit of open files (soft and hard, as
    ///   `ulimit -n` sets them), through `/bin/sh`.
    public init(arguments: [String], openFilesLimit: Int? = nil) async throws {
        let server = Self.executable("fanout-server")
        let (lines, line) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingOldest(1))
        // The first line is always "listening on http(s)://HOST:PORT"; none if it exits first.
        if let openFilesLimit {
            process = try await ChildProcess(
                URL(fileURLWithPath: "/bin/sh"), ["-c", "ulimit -n \(openFilesLimit) && exec \"$0\" \"$@\"", server.path] + arguments,
                onOutputLine: { line.yield($0) }, onExit: { _ in line.finish() })
        } else {
            process = try await ChildProcess(server, arguments, onOutputLine: { line.yield($0) }, onExit: { _ in line.finish() })
        }
        let text = await lines.first { _ in true } ?? ""
        let scheme = text.hasPrefix("listening on https://") ? "https" : "http"
        guard text.hasPrefix("listening on \(scheme)://"),
            let port = text.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        else {
            await process.kill()
            throw CocoaError(
                .fileReadCorruptFile,
                userInfo: [NSLocalizedDescriptionKey: "unexpected first line: \(text); its log:\n\(tail(process.standardError))"])
        }
        self.port = port
        self.scheme = scheme
    }

    /// `http(s)://127.0.0.1:PORT`
    public var url: URL { URL(string: "\(scheme)://127.0.0.1:\(port)")! }

    /// `count` servers with the same arguments, started one after another.
    public static func start(_ count: Int, arguments: [String]) async throws -> [ServerProcess] {
        var servers: [ServerProcess] = []
        for _ in 0..<count { servers.append(try await ServerProcess(arguments: arguments)) }
        return servers
    }

    public func signal(_ signal: Int32) { process.signal(signal) }

    /// What it has written to standard error so far (its log).
    public var standardError: String { process.standardError }

    /// Its exit status once it has exited; -1 if it has not within `timeout` (it is then
    /// killed) or the test was cancelled meanwhile.
    public func waitForExit(timeout: Duration = .seconds(30)) async -> Int32 {
        await process.exitStatus(within: timeout) ?? -1
    }
}

/// How a product executable run to completion ended.
public struct ProcessOutcome: Sendable {
    public let status: Int32
    public let standardOutput: String
    public let standardError: String
    /// It was still running at the deadline and was killed: a retry loop where an exit was due.
    public let timedOut: Bool
}

/// Runs a product executable until it exits, or kills it after `timeout`, so a program that
/// should have given up fails the test instead of hanging it.
public func runToExit(_ name: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessOutcome {
    try await runToExit(executable: ServerProcess.executable(name), arguments, timeout: timeout)
}

/// `runToExit` for any program, by its path (PostgreSQL's, for `PostgresServer`).
public func runToExit(executable: URL, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessOutcome {
    let process = try await ChildProcess(executable, arguments)
    let status = await process.exitStatus(within: timeout)
    // Cancelled (and killed): the caller's task is over, and so is the outcome.
    if status == nil { try Task.checkCancellation() }
    // Killed at the deadline: its status (the signal) once it has gone.
    let killed = status == nil ? await process.exitStatus(within: .seconds(10)) : nil
    return ProcessOutcome(
        status: status ?? killed ?? -1, standardOutput: process.standardOutput, standardError: process.standardError,
        timedOut: status == nil)
}

/// Whether the tests run in CI (`CI` set and not empty, as `.ci/run` does): there a test that
/// needs an outside tool or a release build fails when it is missing instead of skipping.
public let runningInCI = !(ProcessInfo.processInfo.environment["CI"] ?? "").isEmpty

/// Whether `id` has the form of a database's identity (`CartStore.databaseID`): a random
/// (version 4) UUID, in lower case.
public func isDatabaseIdentity(_ id: String?) -> Bool {
    guard let id, UUID(uuidString: id) != nil, id == id.lowercased() else { return false }
    let characters = Array(id)
    return characters[14] == "4" && "89ab".contains(characters[19])
}

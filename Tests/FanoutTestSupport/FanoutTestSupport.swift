import CartStore
import Foundation
import NIOConcurrencyHelpers
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

/// The real `fanout-server` executable, started as a process on port 0.
public final class ServerProcess {
    /// A product executable: from the folder `FANOUT_PRODUCTS` names (`./scripts/test-release` points it
    /// at the release build for its second pass), else the one built next to the test bundle.
    public static func executable(_ name: String) -> URL {
        let folder =
            ProcessInfo.processInfo.environment["FANOUT_PRODUCTS"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        return folder.appending(path: name)
    }

    public let process = Process()
    public let port: Int
    private let stdout = Pipe()
    private let stderr = Pipe()
    private let errors = NIOLockedValueBox(Data())

    /// Starts it and waits (on a thread of its own, never one of the concurrency pool's) for
    /// the line that says where it listens.
    ///
    /// - Parameter openFilesLimit: started under this limit of open files (soft and hard, as
    ///   `ulimit -n` sets them), through `/bin/sh`.
    public init(arguments: [String], openFilesLimit: Int? = nil) async throws {
        let server = Self.executable("fanout-server")
        if let openFilesLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "ulimit -n \(openFilesLimit) && exec \"$0\" \"$@\"", server.path] + arguments
        } else {
            process.executableURL = server
            process.arguments = arguments
        }
        process.standardOutput = stdout
        process.standardError = stderr
        // Read as it comes, on a thread of its own: a full pipe would stall the server.
        let handle = stderr.fileHandleForReading
        Thread.detachNewThread { [errors] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { return }
                errors.withLockedValue { $0.append(chunk) }
            }
        }
        try process.run()
        // The first line is always "listening on http://HOST:PORT". Read with blocking calls: on
        // a thread of its own, since a pool thread held here (there are as many as cores) starved
        // every other test's client and in-process server while a loaded machine started this one.
        let output = stdout.fileHandleForReading
        let text = try await onThreadOfItsOwn {
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = output.availableData
                if chunk.isEmpty { break }
                line.append(chunk)
            }
            return String(decoding: line, as: UTF8.self)
        }
        guard text.hasPrefix("listening on http://"),
            let port = text.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
        else {
            process.terminate()
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "unexpected first line: \(text)"])
        }
        self.port = port
    }

    /// `count` servers with the same arguments, started one after another.
    public static func start(_ count: Int, arguments: [String]) async throws -> [ServerProcess] {
        var servers: [ServerProcess] = []
        for _ in 0..<count { servers.append(try await ServerProcess(arguments: arguments)) }
        return servers
    }

    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// What it has written to standard error so far (its log).
    public var standardError: String { errors.withLockedValue { String(decoding: $0, as: UTF8.self) } }

    /// Its exit status once it has exited; -1 if it has not within `timeout` (it is then
    /// killed) or the test was cancelled meanwhile (see `exitStatus(of:within:)`).
    public func waitForExit(timeout: Duration = .seconds(30)) async -> Int32 {
        await exitStatus(of: process, within: timeout) ?? -1
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
    }
}

/// The exit status of a started process once it has exited; nil if it has not within `timeout`
/// (it is then killed) or the test was cancelled meanwhile. Waits without holding a thread of
/// the concurrency pool (there are as many as cores, and a blocked one starves the in-process
/// servers of other tests), and never without end: a hung program must fail its test rather than
/// hang the whole run.
///
/// Foundation reaps the child on its own thread and only then, on another, says it is no longer
/// running: in between the pid is already gone (`kill(pid, 0)` fails with ESRCH) while
/// `isRunning` is still true, for longer on a loaded machine. That window is a normal exit, not
/// a lost one: its status is waited for like any other. And on Linux Foundation sometimes misses
/// an exit altogether (`isRunning` stays true over a zombie: `waitUntilExit` once spun for good
/// on one, and full runs saw servers that had exited "still running" after 30 s): so the child's
/// status is also read here, without reaping it (`exitedChildStatus`), and that is the answer.
/// The status is Foundation's `terminationStatus`: the exit code, or the signal that ended it.
public func exitStatus(of process: Process, within timeout: Duration = .seconds(30)) async -> Int32? {
    let deadline = ContinuousClock.now + timeout
    let pid = process.processIdentifier
    while process.isRunning {
        if let status = exitedChildStatus(pid) { return status }
        if ContinuousClock.now >= deadline || Task.isCancelled {
            if kill(pid, 0) == 0 { kill(pid, SIGKILL) }
            return nil
        }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return process.terminationStatus
}

/// The status of child `pid` once it has exited and before anyone reaped it (a zombie), read
/// with `WNOWAIT` so that Foundation can still reap it: the exit code, or the signal that
/// ended it; nil while it runs, and once it has been reaped.
func exitedChildStatus(_ pid: Int32) -> Int32? {
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid == pid else {
        return nil
    }
    return info._sifields._sigchld.si_status
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
/// should have given up fails the test instead of hanging it. Waits without blocking a thread of
/// the concurrency pool (the in-process servers of other tests need them), and reads both pipes
/// as they fill, so a talkative program cannot stall on a full one.
public func runToExit(_ name: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessOutcome {
    try await runToExit(executable: ServerProcess.executable(name), arguments, timeout: timeout)
}

/// `runToExit` for any program, by its path (PostgreSQL's, for `PostgresServer`).
public func runToExit(executable: URL, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessOutcome {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    let standardOutput = PipeCollector()
    let standardError = PipeCollector()
    process.standardOutput = standardOutput.pipe
    process.standardError = standardError.pipe
    try process.run()
    let status = await exitStatus(of: process, within: timeout)
    // Cancelled (and killed): the caller's task is over, and so is the outcome.
    if status == nil { try Task.checkCancellation() }
    // Killed at the deadline: its status (the signal) once it has gone; its pipes close then.
    let killed = status == nil ? await exitStatus(of: process, within: .seconds(10)) : nil
    return ProcessOutcome(
        status: status ?? killed ?? -1, standardOutput: await standardOutput.finish(),
        standardError: await standardError.finish(), timedOut: status == nil)
}

/// A pipe read to its end on a thread of its own (not one of the concurrency pool's).
private final class PipeCollector: Sendable {
    let pipe = Pipe()
    private let collected = NIOLockedValueBox<Data?>(nil)

    init() {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [collected] in
            let data = handle.readDataToEndOfFile()
            collected.withLockedValue { $0 = data }
        }
    }

    /// Everything written, once every writer has closed the pipe.
    func finish() async -> String {
        while true {
            if let data = collected.withLockedValue({ $0 }) { return String(decoding: data, as: UTF8.self) }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
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

import Foundation
import NIOConcurrencyHelpers
import Subprocess
import SystemPackage

#if canImport(Glibc)
    import Glibc
#endif

/// A program a test starts, run with apple's swift-subprocess: its exit is seen through a
/// process descriptor (pidfd) of its own, never missed and never taken from another child; its
/// signals go through that descriptor, never to a recycled pid; its output is read as it comes
/// on swift-subprocess's I/O thread, not a thread of the concurrency pool; and it starts with an
/// empty signal mask, whatever the test process blocks.
///
/// Foundation's `Process` missed exits here (`isRunning` true over a child that had gone) and
/// its `waitUntilExit` held a thread of the pool: none of that is left in the tests.
public final class ChildProcess: Sendable {
    /// The most bytes of each output kept: past it the oldest half is dropped.
    public static let keptBytes = 4 << 20

    private struct State {
        var execution: Execution<NoInput, SequenceOutput, SequenceOutput>?
        var standardOutput = Data()
        var standardError = Data()
        /// The exit code, or the signal that ended it, once it has exited.
        var status: Int32?
    }

    public let processIdentifier: pid_t
    private let state = NIOLockedValueBox(State())
    private let exited: Task<Void, Never>

    /// Starts `executable` with `arguments`, and returns once it runs.
    ///
    /// - Parameters:
    ///   - environment: variables set (or, nil, removed) over the test process's environment.
    ///   - workingDirectory: where it starts; the test process's own if nil.
    ///   - onOutputLine: called with each line it writes to standard output, in order, without
    ///     the line's end, as it comes.
    ///   - onExit: called once it has exited, with its status.
    /// - Throws: `SubprocessError` when it cannot be started (no such file, not executable).
    public init(
        _ executable: URL, _ arguments: [String], environment: [Environment.Key: String?] = [:], workingDirectory: URL? = nil,
        onOutputLine: (@Sendable (String) -> Void)? = nil,
        onExit: (@Sendable (Int32) -> Void)? = nil
    ) async throws {
        let state = self.state
        let (started, starting) = AsyncStream.makeStream(of: pid_t.self, bufferingPolicy: .bufferingNewest(1))
        let launch = Task { () throws -> TerminationStatus in
            defer { starting.finish() }
            let result = try await Subprocess.run(
                .path(FilePath(executable.path)), arguments: Arguments(arguments),
                environment: .inherit.updating(environment),
                workingDirectory: workingDirectory.map { FilePath($0.path) }, input: .none, output: .sequence, error: .sequence
            ) { execution in
                state.withLockedValue { $0.execution = execution }
                starting.yield(execution.processIdentifier.value)
                // Both pipes drained at once: a full one would stall the program.
                async let errors: Void = Self.drain(execution.standardError) { chunk in
                    state.withLockedValue { Self.keep(chunk, in: &$0.standardError) }
                }
                var partial = Data()
                try await Self.drain(execution.standardOutput) { chunk in
                    state.withLockedValue { Self.keep(chunk, in: &$0.standardOutput) }
                    guard let onOutputLine else { return }
                    partial.append(chunk)
                    while let end = partial.firstIndex(of: UInt8(ascii: "\n")) {
                        onOutputLine(String(decoding: partial[partial.startIndex..<end], as: UTF8.self))
                        partial.removeSubrange(partial.startIndex...end)
                    }
                }
                try await errors
            }
            return result.terminationStatus
        }
        guard let pid = await started.first(where: { _ in true }) else {
            _ = try await launch.value  // why it did not start
            throw CancellationError()
        }
        processIdentifier = pid
        exited = Task {
            let status: Int32
            switch await launch.result {
            case .success(.exited(let code)): status = code
            case .success(.signaled(let signal)): status = signal
            case .failure: status = -1
            }
            state.withLockedValue {
                $0.status = status
                $0.execution = nil
            }
            onExit?(status)
        }
    }

    private static func drain(_ output: SubprocessOutputSequence, _ take: (Data) -> Void) async throws {
        for try await buffer in output {
            take(buffer.withUnsafeBytes { Data($0) })
        }
    }

    private static func keep(_ chunk: Data, in kept: inout Data) {
        kept.append(chunk)
        if kept.count > keptBytes { kept.removeSubrange(kept.startIndex..<(kept.startIndex + kept.count - keptBytes / 2)) }
    }

    /// What it has written to standard output so far (the last `keptBytes`).
    public var standardOutput: String { state.withLockedValue { String(decoding: $0.standardOutput, as: UTF8.self) } }

    /// What it has written to standard error so far (the last `keptBytes`).
    public var standardError: String { state.withLockedValue { String(decoding: $0.standardError, as: UTF8.self) } }

    public var isRunning: Bool { state.withLockedValue { $0.status == nil } }

    /// Sends `signal`, if it still runs.
    public func signal(_ signal: Int32) {
        state.withLockedValue { state in
            guard state.status == nil else { return }
            if let execution = state.execution {
                try? execution.send(signal: Signal(rawValue: signal))
            } else {
                // Its output closed, and it has not exited yet: not yet reaped, its pid is its own.
                _ = Glibc.kill(processIdentifier, signal)
            }
        }
    }

    /// Its exit status once it has exited: the exit code, or the signal that ended it. Nil if
    /// it has not within `timeout` (it is then killed) or the waiting task was cancelled: a
    /// program that hangs fails its test instead of the whole run.
    public func exitStatus(within timeout: Duration = .seconds(30)) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.milliseconds(2)
        while true {
            if let status = state.withLockedValue({ $0.status }) { return status }
            if ContinuousClock.now >= deadline || Task.isCancelled {
                signal(SIGKILL)
                return nil
            }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(50))
        }
    }

    /// Kills it (SIGKILL) and returns once it has gone.
    public func kill() async {
        signal(SIGKILL)
        await exited.value
    }

    /// For a test that ended before its program did: SIGKILL ends it (its task then sees it go).
    deinit { signal(SIGKILL) }
}

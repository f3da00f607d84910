import CartStore
import Foundation
import Testing

/// Waits until `condition` holds, polling, or records a failure after `timeout`: the tests'
/// way to wait for something asynchronous without sleeping a guessed time.
public func eventually(
    timeout: Duration = .seconds(10), _ what: String,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try? await Task.sleep(for: .milliseconds(5))
    }
    Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
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
    /// A product executable, built next to the test bundle.
    public static func executable(_ name: String) -> URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appending(path: name)
    }

    public let process = Process()
    public let port: Int
    private let stdout = Pipe()

    public init(arguments: [String]) throws {
        process.executableURL = Self.executable("fanout-server")
        process.arguments = arguments
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The first line is always "listening on http://HOST:PORT".
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = stdout.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("listening on http://"), let port = text.split(separator: ":").last.flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) else {
            process.terminate()
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "unexpected first line: \(text)"])
        }
        self.port = port
    }

    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits without holding a thread of the concurrency pool (there are as many as cores, and
    /// a blocked one starves the in-process servers of other tests).
    public func waitForExit() async -> Int32 {
        while process.isRunning { try? await Task.sleep(for: .milliseconds(10)) }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}


/// How a product executable run to completion ended.
public struct ProcessOutcome: Sendable {
    public let status: Int32
    public let standardError: String
    /// It was still running at the deadline and was killed: a retry loop where an exit was due.
    public let timedOut: Bool
}

/// Runs a product executable until it exits, or kills it after `timeout`, so a program that
/// should have given up fails the test instead of hanging it.
public func runToExit(_ name: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> ProcessOutcome {
    let process = Process()
    process.executableURL = ServerProcess.executable(name)
    process.arguments = arguments
    let standardError = Pipe()
    process.standardError = standardError
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    let deadline = ContinuousClock.now + timeout
    while process.isRunning, ContinuousClock.now < deadline {
        try await Task.sleep(for: .milliseconds(10))
    }
    let timedOut = process.isRunning
    if timedOut { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
    let message = String(decoding: standardError.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    return ProcessOutcome(status: process.terminationStatus, standardError: message, timedOut: timedOut)
}

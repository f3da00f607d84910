import FanoutTestSupport
import Foundation
import Testing

/// Where the release build of `fanout-client` is, when there is one.
///
/// An optimised build can end a value's life at its last use, earlier than the debug build
/// does: the signal handling once worked in debug and left Ctrl-C ignored in release. So the
/// signal tests also run the release binary, which the README's test command (`./scripts/test`)
/// builds first. Run alone, `swift test` skips that test and says how to enable it; in CI
/// (`CI=true`) a missing release binary fails it instead.
enum ReleaseClient {
    /// `<scratch>/<triple>/release/fanout-client`, next to the tests' own `debug` folder
    /// (`.build/release/fanout-client` with the default scratch path).
    static var executable: URL {
        ServerProcess.executable("fanout-client").deletingLastPathComponent().deletingLastPathComponent()
            .appending(path: "release").appending(path: "fanout-client")
    }

    static var isBuilt: Bool { FileManager.default.isExecutableFile(atPath: executable.path) }

    static var isCI: Bool { ["true", "1"].contains(ProcessInfo.processInfo.environment["CI"]?.lowercased() ?? "") }
}

@Suite("Client signals", .serialized, .timeLimit(.minutes(2)))
struct ClientSignalTests {
    @Test(arguments: [SIGINT, SIGTERM])
    func theDebugClientExitsZeroOnSignal(_ signal: Int32) async throws {
        try await Self.expectExitZero(on: signal, executable: ServerProcess.executable("fanout-client"))
    }

    @Test(
        .enabled(
            if: ReleaseClient.isBuilt || ReleaseClient.isCI,
            "no release build of fanout-client: run ./scripts/test, or `swift build -c release --product fanout-client` first, to check Ctrl-C and SIGTERM in release too"),
        arguments: [SIGINT, SIGTERM])
    func theReleaseClientExitsZeroOnSignal(_ signal: Int32) async throws {
        guard ReleaseClient.isBuilt else {
            Issue.record("CI=true and \(ReleaseClient.executable.path) is missing: CI must run ./scripts/test, which builds it")
            return
        }
        try await Self.expectExitZero(on: signal, executable: ReleaseClient.executable)
    }

    /// A subscribed client gets `signal` and must exit 0 promptly; a client that ignores it is
    /// still running at the deadline.
    static func expectExitZero(on signal: Int32, executable: URL, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try ServerProcess(arguments: ["--port", "0", "--db", database])
        defer { server.signal(SIGTERM) }
        let client = try SubscribeProcess(port: server.port, executable: executable)
        await eventually("the snapshot", sourceLocation: sourceLocation) { client.output.first?.type == "snapshot" }
        client.signal(signal)
        let deadline = ContinuousClock.now + .seconds(10)
        while client.process.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        guard !client.process.isRunning else {
            Issue.record("\(executable.path) ignored signal \(signal): still running 10 s later", sourceLocation: sourceLocation)
            return
        }
        #expect(client.process.terminationReason == .exit, "killed by the signal instead of exiting", sourceLocation: sourceLocation)
        #expect(client.process.terminationStatus == 0, sourceLocation: sourceLocation)
    }
}

import FanoutTestSupport
import Foundation
import Testing

/// The HTTP API against its OpenAPI document (`docs/openapi.json`, served at `/openapi.json`),
/// checked by schemathesis on the real `fanout-server`: no 5xx, every status code and body as
/// documented, valid input accepted and invalid input refused, and the stateful links (add a
/// line, then read, change, remove it, clear the cart) followed.
///
/// schemathesis is a Python tool (`pip install schemathesis`; `.ci/run` installs it). Without it
/// these tests are skipped, saying so, except in CI (`CI` set), where they fail.
@Suite(
    "Contract (schemathesis)", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(5)),
    .enabled(if: Schemathesis.executable != nil || Schemathesis.required, "pip install schemathesis enables the contract tests"))
struct ContractTests {
    /// With `--token`, as the document describes the server: every operation but `/healthz` and
    /// `/openapi.json` needs it, which schemathesis checks by leaving it out. (Without a token the
    /// same routes answer the same, minus the 401s; a run on that would only have to be told to
    /// ignore what the document says of the token.)
    @Test func theServerMatchesItsOpenAPIDocument() async throws {
        let token = "contract-\(UUID().uuidString)"
        // Every operation, `/subscribe` included (schemathesis.toml says what it answers a
        // request that is neither an upgrade nor a stream).
        try await Schemathesis.check(
            serverArguments: ["--token", token],
            schemathesisArguments: [
                "--header", "Authorization: Bearer \(token)",
            ])
    }
}

enum Schemathesis {
    /// The `schemathesis` command on the `PATH`, if installed.
    static let executable: URL? = (ProcessInfo.processInfo.environment["PATH"] ?? "")
        .split(separator: ":")
        .map { URL(fileURLWithPath: String($0)).appending(path: "schemathesis") }
        .first { FileManager.default.isExecutableFile(atPath: $0.path) }

    /// In CI a missing schemathesis is a failure, not a skip.
    static let required = runningInCI

    /// The repository's `schemathesis.toml`: the expected statuses this API differs on, with why.
    static let configuration = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "schemathesis.toml")

    /// Test cases per operation and phase: enough to walk every status and link, bounded in time.
    static let maxExamples = 25

    /// Runs schemathesis against a fresh server (port 0, a temporary database) started with
    /// `serverArguments`, on the document the server itself serves; records its report as the
    /// failure if it finds anything.
    static func check(serverArguments: [String], schemathesisArguments: [String]) async throws {
        let schemathesis = try #require(executable, "schemathesis is not installed: pip install schemathesis")
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-contract-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(
            arguments: ["--port", "0", "--db", directory.appending(path: "db.sqlite").path] + serverArguments)
        let base = "http://127.0.0.1:\(server.port)"

        let seed = UInt32.random(in: .min ... .max)
        let process = try await ChildProcess(
            schemathesis,
            [
                "--config-file", configuration.path, "run", "\(base)/openapi.json", "--url", base,
                "--max-examples", "\(maxExamples)", "--request-timeout", "10",
                "--wait-for-schema", "10",
                // A seed of its own each run, said on failure: a failing run can be run again.
                "--seed", "\(seed)",
            ] + schemathesisArguments,
            // Hypothesis keeps its example database in the working directory: a temporary one.
            environment: ["NO_COLOR": "1"], workingDirectory: directory)
        let exit = await process.exitStatus(within: .seconds(240))
        let timedOut = exit == nil
        // Killed at the deadline: its status once it has gone.
        if timedOut { _ = await process.exitStatus(within: .seconds(10)) }
        let text = process.standardOutput + process.standardError
        #expect(!timedOut, "schemathesis ran past 4 minutes (seed \(seed)); the server said:\n\(server.standardError.suffix(4_000))")
        #expect(
            exit == 0, "schemathesis found problems (seed \(seed)):\n\(text.suffix(12_000))")
        #expect(server.process.isRunning, "the server died during the run")
        server.signal(SIGTERM)
        let status = await server.waitForExit()
        #expect(status == 0, "SIGTERM ends the server cleanly (exit status \(status); -1: still running after 30 s)")
    }
}

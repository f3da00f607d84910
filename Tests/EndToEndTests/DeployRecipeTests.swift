import FanoutTestSupport
import Foundation
import Testing

/// The systemd unit OPERATING.md gives (`deploy/fanout-server.service`): its `ExecStart` is a
/// command the server takes, started as it is with only its binary, state folder and port put
/// in, logging JSON as the unit promises, and ending cleanly on the unit's `KillSignal`.
@Suite("The deploy recipes", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(1)))
struct DeployRecipeTests {
    static let unit = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "deploy/fanout-server.service")

    @Test func theSystemdUnitsCommandStartsTheServerAndItsSignalStopsIt() async throws {
        let text = try String(contentsOf: Self.unit, encoding: .utf8)
        let settings = Dictionary(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") && $0.contains("=") }.map { line in
                let parts = line.split(separator: "=", maxSplits: 1)
                return (String(parts[0]), String(parts[1]))
            }, uniquingKeysWith: { first, _ in first })
        let command = try #require(settings["ExecStart"]).split(separator: " ").map(String.init)
        #expect(command.first == "/usr/local/bin/fanout-server")
        #expect(settings["KillSignal"] == "SIGTERM")
        #expect(settings["StateDirectory"] == "fanout")
        // systemd's own check of the unit, where the machine has it, with the real binary.
        let analyze = URL(fileURLWithPath: "/usr/bin/systemd-analyze")
        if FileManager.default.isExecutableFile(atPath: analyze.path) {
            let folder = FileManager.default.temporaryDirectory.appending(path: "fanout-unit-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let copy = folder.appending(path: "fanout-server.service")
            try text.replacingOccurrences(of: "/usr/local/bin/fanout-server", with: ServerProcess.executable("fanout-server").path)
                .write(to: copy, atomically: true, encoding: .utf8)
            let verified = try await runToExit(executable: analyze, ["verify", copy.path])
            #expect(verified.status == 0 && verified.standardError.isEmpty, "systemd-analyze verify: \(verified.standardError)")
        } else {
            print("systemd-analyze is missing: the unit's syntax is not checked (apt-get install systemd)")
        }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let stateFolder = URL(fileURLWithPath: database).deletingLastPathComponent().path
        var arguments: [String] = []
        for argument in command.dropFirst() {
            // The unit's port, taken here by another program perhaps: 0 picks a free one.
            arguments.append(arguments.last == "--port" ? "0" : argument.replacingOccurrences(of: "/var/lib/fanout", with: stateFolder))
        }
        #expect(arguments.contains("--log-format") && arguments.contains("json"))
        let server = try await ServerProcess(arguments: arguments)
        #expect(FileManager.default.fileExists(atPath: stateFolder + "/fanout.sqlite"), "the database in the state folder")
        #expect(
            await Mutations.send(port: server.port, "POST", "/carts/a/items", body: #"{"sku":"s","quantity":1,"unitPriceCents":1}"#) == 1)
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        let lines = server.standardError.split(separator: "\n")
        #expect(
            !lines.isEmpty && lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) is [String: Any] }, "JSON lines")
        #expect(server.standardError.contains(#""message":"shutdown done""#), "\(server.standardError.suffix(1_000))")
    }
}

import FanoutTestSupport
import Foundation
import Testing

/// `RemoteCartStore`'s lifetime rules (a released observer gets nothing and its release closes
/// the connection; one removed in its callback gets nothing after; an ended `updates` loop lets
/// go), checked by a probe process built like the executables: debug here, release in
/// ./scripts/test-release, where the optimiser may end a life at its last use.
@Suite("Remote store lifetimes", .timeLimit(.minutes(2)))
struct RemoteStoreLifetimeTests {
    @Test func releasedObserversDropOutAndCloseTheConnection() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let server = try ServerProcess(arguments: ["--port", "0", "--db", database])
        let probe = try await runToExit("remote-store-probe", ["http://127.0.0.1:\(server.port)"], timeout: .seconds(60))
        #expect(probe.status == 0, "stderr: \(probe.standardError)")
        #expect(probe.standardOutput.contains("every check held"))
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }
}

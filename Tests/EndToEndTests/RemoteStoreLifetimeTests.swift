import FanoutTestSupport
import Foundation
import Testing

/// `RemoteCartStore`'s lifetime rules (a released observer gets nothing and its release closes
/// the connection; one removed in its callback gets nothing after; an ended `updates` loop lets
/// go), checked by a probe process built like the executables: debug here, release in
/// ./scripts/test-release, where the optimiser may end a life at its last use.
@Suite("Remote store lifetimes", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct RemoteStoreLifetimeTests {
    @Test func releasedObserversDropOutAndCloseTheConnection() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let probe = try await runToExit("remote-store-probe", ["http://127.0.0.1:\(server.port)"], timeout: .seconds(60))
        #expect(probe.status == 0, "stderr: \(probe.standardError)")
        #expect(probe.standardOutput.contains("every check held"))
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// A cart the token may not see is refused to the observer that asked for it, and the store
    /// goes on serving the others: the state checks, in whatever build the probe is.
    @Test func aRefusedCartIsItsObserversAndTheOthersAreServed() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let secret = "a probe secret of at least 32 bytes long"
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--jwt-secret", secret])
        let minted = try await runToExit(
            "fanout-server", ["token", "--jwt-secret", secret, "--sub", "p", "--carts", "a", "--scope", "read write"])
        let token = minted.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(minted.status == 0 && !token.isEmpty, "\(minted.standardError)")
        let probe = try await runToExit(
            "remote-store-probe", ["--refusal", "http://127.0.0.1:\(server.port)", token], timeout: .seconds(60))
        #expect(probe.status == 0, "stderr: \(probe.standardError)")
        #expect(probe.standardOutput.contains("every refusal check held"))
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }
}

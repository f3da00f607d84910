import FanoutTestSupport
import Foundation
import Testing

/// Ctrl-C and SIGTERM end a subscribed `fanout-client` with status 0. `./scripts/test-release` runs this
/// against the release build too, where an optimised build once released the signal sources at
/// once and left both signals ignored.
@Suite("Client signals", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(2)))
struct ClientSignalTests {
    @Test(arguments: [SIGINT, SIGTERM])
    func aSubscribedClientExitsZeroOnSignal(_ signal: Int32) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        defer { server.signal(SIGTERM) }
        let client = try await SubscribeProcess(port: server.port)
        await eventually("the snapshot") { client.output.first?.type == "snapshot" }
        client.signal(signal)
        guard let status = await client.exitCode(timeout: .seconds(10)) else {
            Issue.record("fanout-client ignored signal \(signal): still running 10 s later")
            return
        }
        // Killed by the signal instead of exiting, the status would be the signal's number.
        #expect(status == 0)
    }
}

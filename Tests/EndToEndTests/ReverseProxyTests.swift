import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// TLS ended by nginx in front, configured as OPERATING.md's recipe says
/// (`deploy/nginx-fanout.conf`): WebSocket, Server-Sent Events, long-poll and writes go through
/// it, each event once and as it comes. The page through it is in `PageTests`.
///
/// Needs nginx (`apt-get install nginx-light`; `.ci/run` installs it): without it these tests
/// are skipped, saying so, except in CI, where they fail.
@Suite(
    "Behind a reverse proxy (nginx)", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(3)),
    .enabled(
        if: FileManager.default.isExecutableFile(atPath: NginxProxy.executable.path) || runningInCI,
        "apt-get install nginx-light enables the reverse-proxy tests"))
struct ReverseProxyTests {
    @Test func everyTransportAndWritesGoThroughTheRecipesProxy() async throws {
        let certificate = try await TestCertificate.make()
        defer { certificate.remove() }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--heartbeat-interval", "0.5"])
        let proxy = try await NginxProxy(upstream: server.port, certificate: certificate)
        let trust = try ServerTrust.certificates(pemFile: certificate.certificate)
        let api = CartServerAPI(baseURL: proxy.url, trust: trust)

        let subscriptions = EveryTransport(server: proxy.url, trust: trust)
        defer { subscriptions.cancel() }
        #expect(await eventually("both subscriptions welcomed through the proxy") { subscriptions.allWelcomed })
        // A long-poll waiting through the proxy is answered by the write that follows.
        let poll = Task { try await api.send("GET", "/events?since=0&wait=30", as: EventsPage.self) }
        #expect(await eventually("the long-poll waiting") { await ReverseProxyTests.waitingPolls(port: server.port) == 1 })
        for quantity in 1...3 {
            _ = try await api.addItem("apple", quantity: quantity, unitPriceCents: 50, to: "alice")
        }
        let polled = try await poll.value
        #expect(polled.events.first?.seq == 1, "the waiting long-poll got the first write")
        let everyone = await eventually("every event on both subscribers") {
            subscriptions.eachSaw([1, 2, 3])
        }
        #expect(everyone, "\(subscriptions.seqs)")

        await proxy.stop()
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// Long-polls waiting on the server now (`/stats`, asked directly).
    static func waitingPolls(port: Int) async -> Int? {
        guard let (data, _) = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stats")!),
            let stats = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        return (stats["waitingPolls"] as? NSNumber)?.intValue
    }
}

import FanoutClient
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// `https://` and `wss://` servers: the client speaks TLS and checks the certificate against the
/// system's trust roots, so a self-signed one is refused (and retried), never trusted silently.
@Suite("TLS", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(1)))
struct TLSTests {
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func aSelfSignedServerIsRefusedWithTheReason(transport: FanoutSubscription.Transport) async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") else {
            if ProcessInfo.processInfo.environment["CI"] != nil { Issue.record("openssl is missing (apt-get install openssl)") }
            print("TLSTests skipped: /usr/bin/openssl is missing (apt-get install openssl)")
            return
        }
        let made = try await TestCertificate.make()
        defer { made.remove() }
        let (key, certificate) = (made.key.path, made.certificate.path)
        let port = try freeLoopbackPort()
        let server = try await ChildProcess(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            ["s_server", "-accept", "\(port)", "-key", key, "-cert", certificate, "-www", "-quiet"])
        defer { server.signal(SIGKILL) }

        let reasons = NIOLockedValueBox<[String]>([])
        let subscription = FanoutSubscription(server: URL(string: "https://127.0.0.1:\(port)")!, transport: transport)
        let (never, _) = AsyncStream<Void>.makeStream()
        let run = Task {
            try await subscription.run(plan: { .init(carts: nil, since: nil) }, reconsider: never) { update in
                if case .disconnected(let problem, _) = update { reasons.withLockedValue { $0.append(problem.description) } }
            }
        }
        defer { run.cancel() }
        // (Until openssl listens, the reason is a refused connection.)
        let refused = await eventually(timeout: .seconds(20), "a handshake refused for the certificate") {
            reasons.withLockedValue { $0.contains { $0.lowercased().contains("certificate") } }
        }
        #expect(refused, "reasons: \(reasons.withLockedValue { $0 })")
    }
}

import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// `fanout-server --tls-cert --tls-key`: `https://` and `wss://`, reached by FanoutClient and
/// the CLI told to trust the server's authority, refused (saying why) by those that are not; and
/// the start-up errors of certificates that cannot be used. The page over TLS is in
/// `PageTests`; TLS ended by a proxy in front, in `ReverseProxyTests`.
@Suite(
    "TLS end to end", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(3)),
    .enabled(
        if: FileManager.default.isExecutableFile(atPath: TestCertificate.openssl.path) || runningInCI,
        "apt-get install openssl enables the TLS tests"))
struct TLSEndToEndTests {
    /// Every way in, over TLS: FanoutClient's WebSocket and event stream, its HTTP writes, and
    /// `fanout-client subscribe` and `cart`; a client that does not trust the certificate is
    /// told so, and one speaking plain HTTP to the TLS port gets nowhere.
    @Test func aTLSServerServesTheClientsThatTrustItsAuthority() async throws {
        let certificate = try await TestCertificate.make()
        defer { certificate.remove() }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: [
            "--port", "0", "--db", database, "--heartbeat-interval", "0.5",
            "--tls-cert", certificate.certificate.path, "--tls-key", certificate.key.path,
        ])
        #expect(server.scheme == "https", "the first line says https://")
        let trust = try ServerTrust.certificates(pemFile: certificate.certificate)
        let api = CartServerAPI(baseURL: server.url, trust: trust)

        // FanoutClient, both transports: each sees a write made over https.
        let subscriptions = EveryTransport(server: server.url, trust: trust)
        defer { subscriptions.cancel() }
        let cli = try await SubscribeProcess(
            port: server.port, scheme: "wss", arguments: ["--since", "0", "--cacert", certificate.certificate.path])
        defer { cli.signal(SIGKILL) }
        let written = try await api.addItem("apple", quantity: 2, unitPriceCents: 50, to: "alice")
        #expect(written.seq == 1)
        // `fanout-client cart` over https, trusting the same authority.
        let added = try await runToExit(
            "fanout-client",
            [
                "cart", "add", "alice", "pear", "--quantity", "1", "--price", "80", "--url", server.url.absoluteString, "--cacert",
                certificate.certificate.path,
            ])
        #expect(added.status == 0, "\(added.standardError)")
        let everyone = await eventually("both events on every subscriber") {
            subscriptions.eachSaw([1, 2]) && cli.eventSeqs == [1, 2]
        }
        #expect(everyone, "FanoutClient: \(subscriptions.seqs), the CLI: \(cli.eventSeqs)")

        // Without the authority: the system's roots do not know it; said as a person reads it.
        let untrusted = try await runToExit("fanout-client", ["cart", "list", "--url", server.url.absoluteString])
        #expect(untrusted.status == 1)
        #expect(untrusted.standardError.contains("certificate is not trusted"), "\(untrusted.standardError)")
        await #expect {
            _ = try await CartServerAPI(baseURL: server.url).carts()
        } throws: { error in
            "\(error)".contains("certificate is not trusted")
        }
        let notPEM = try await runToExit(
            "fanout-client", ["cart", "list", "--url", server.url.absoluteString, "--cacert", certificate.key.path + ".missing"])
        #expect(notPEM.status == 64, "an unreadable --cacert is an argument error")
        #expect(notPEM.standardError.contains("--cacert"), "\(notPEM.standardError)")
        // Plain HTTP to the TLS port: no answer is had, and the server goes on.
        await #expect(throws: RemoteStoreError.self) {
            _ = try await CartServerAPI(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!).carts()
        }
        #expect(try await api.carts().carts.map(\.id) == ["alice"])

        // The start line says TLS is on; a certificate valid for a day is near its end.
        #expect(server.standardError.contains("fanout.tls=on"), "\(server.standardError.prefix(2_000))")
        #expect(server.standardError.contains("the TLS certificate (--tls-cert) expires on"))
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// A certificate or key that cannot be used stops the start with the reason, before it
    /// listens: never a server whose every handshake fails.
    @Test func certificatesThatCannotBeUsedStopTheStartSayingWhy() async throws {
        let certificate = try await TestCertificate.make()
        defer { certificate.remove() }
        let other = try await TestCertificate.make()
        defer { other.remove() }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let notPEM = certificate.folder.appending(path: "notes.txt")
        try "not a certificate\n".write(to: notPEM, atomically: true, encoding: .utf8)
        let cases: [(arguments: [String], status: Int32, says: String)] = [
            (["--tls-cert", certificate.certificate.path], 64, "--tls-cert and --tls-key go together"),
            (
                ["--tls-cert", "/nonexistent/cert.pem", "--tls-key", certificate.key.path], 1,
                "cannot use --tls-cert /nonexistent/cert.pem: no such file"
            ),
            (
                ["--tls-cert", notPEM.path, "--tls-key", certificate.key.path], 1,
                "cannot use --tls-cert \(notPEM.path): it does not hold a PEM certificate"
            ),
            (
                ["--tls-cert", certificate.certificate.path, "--tls-key", notPEM.path], 1,
                "cannot use --tls-key \(notPEM.path): it does not hold a PEM private key"
            ),
            (["--tls-cert", certificate.certificate.path, "--tls-key", other.key.path], 1, "is not the private key of the certificate"),
        ]
        for (arguments, status, says) in cases {
            let outcome = try await runToExit("fanout-server", ["--port", "0", "--db", database] + arguments)
            #expect(outcome.status == status, "\(arguments): \(outcome.standardError)")
            #expect(outcome.standardError.contains(says), "\(arguments): \(outcome.standardError)")
            #expect(!outcome.standardOutput.contains("listening on"), "\(arguments)")
            #expect(!FileManager.default.fileExists(atPath: database), "\(arguments): a failed start leaves no database behind")
        }
    }
}

/// A `FanoutSubscription` of every transport to one server, from seq 0, each recording the
/// seqs of the events it gets and whether it was welcomed.
final class EveryTransport: Sendable {
    private let seen = NIOLockedValueBox<[FanoutSubscription.Transport: [Int64]]>([:])
    private let welcomed = NIOLockedValueBox<Set<FanoutSubscription.Transport>>([])
    private let runs: [Task<Void, any Error>]

    init(server: URL, trust: ServerTrust) {
        let (seen, welcomed) = (seen, welcomed)
        runs = FanoutSubscription.Transport.allCases.map { transport in
            let subscription = FanoutSubscription(server: server, transport: transport, trust: trust)
            let (never, _) = AsyncStream<Void>.makeStream()
            return Task {
                try await subscription.run(plan: { .init(carts: nil, since: 0) }, reconsider: never) { update in
                    switch update {
                    case .welcome: _ = welcomed.withLockedValue { $0.insert(transport) }
                    case .event(let event, _): seen.withLockedValue { $0[transport, default: []].append(event.seq) }
                    default: break
                    }
                }
            }
        }
    }

    /// The seqs each transport's subscription got, in order.
    var seqs: [FanoutSubscription.Transport: [Int64]] { seen.withLockedValue { $0 } }
    var allWelcomed: Bool { welcomed.withLockedValue { $0.count == FanoutSubscription.Transport.allCases.count } }

    /// Whether every transport's subscription got exactly these seqs.
    func eachSaw(_ expected: [Int64]) -> Bool {
        let seqs = seqs
        return FanoutSubscription.Transport.allCases.allSatisfy { seqs[$0] == expected }
    }

    func cancel() { for run in runs { run.cancel() } }
}

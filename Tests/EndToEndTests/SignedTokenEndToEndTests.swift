import FanoutTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Signed tokens with the real executables: `fanout-server token` mints them, `fanout-client`
/// sends one as its `--token`, and an expired one ends the client's subscription (the expiry
/// timer, in the release build too: `scripts/test-release`).
@Suite("Signed tokens end to end", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct SignedTokenEndToEndTests {
    static let secret = "an end-to-end secret of at least 32 bytes"
    static let operatorToken = "op3rator"

    /// A token, as a script gets one: `fanout-server token …` on stdout.
    static func mint(_ arguments: [String]) async throws -> String {
        let outcome = try await runToExit("fanout-server", ["token", "--jwt-secret", secret] + arguments)
        #expect(outcome.status == 0, "stderr: \(outcome.standardError)")
        return outcome.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The default leases: the only ending a subscriber here may meet is its token's.
    static func server(_ database: String) async throws -> ServerProcess {
        try await ServerProcess(arguments: ["--port", "0", "--db", database, "--token", operatorToken, "--jwt-secret", secret])
    }

    @Test(arguments: EndToEndTests.transports)
    func fanoutClientWithAlicesTokenFollowsAndChangesOnlyHerCarts(transport: String) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await Self.server(database)
        let port = server.port
        let alice = try await Self.mint(["--sub", "alice", "--carts", "alice,alice-wishlist", "--scope", "read write", "--ttl", "1h"])
        let client = try await SubscribeProcess(port: port, arguments: ["--transport", transport, "--token", alice])
        await eventually("the snapshot") { client.output.first?.type == "snapshot" }
        let connection = ["--url", "http://127.0.0.1:\(port)", "--token", alice]
        let mine = try await CartCommandTests.client(["cart", "add", "alice", "apple", "--quantity", "1", "--price", "1"] + connection)
        #expect(mine.status == 0, "stderr: \(mine.error)")
        let bobs = try await CartCommandTests.client(["cart", "add", "bob", "apple", "--quantity", "1", "--price", "1"] + connection)
        #expect(bobs.status == 1)
        #expect(bobs.error.contains("403 forbidden_cart"), "stderr: \(bobs.error)")
        let body = #"{"sku":"pear","quantity":1,"unitPriceCents":10}"#
        #expect(await Mutations.send(port: port, "POST", "/carts/bob/items", body: body, token: Self.operatorToken) == 2)
        #expect(await Mutations.send(port: port, "POST", "/carts/alice-wishlist/items", body: body, token: Self.operatorToken) == 3)
        await eventually("her two events") { client.eventSeqs.count >= 2 }
        #expect(client.eventSeqs == [1, 3])
        let list = try await CartCommandTests.client(["cart", "list"] + connection)
        #expect(list.output.contains("alice") && !list.output.contains("bob"), "\(list.output)")
        client.signal(SIGTERM)
        _ = await client.waitForExit()
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// A short secret is weak but works, as it does for other JWT libraries: a token PyJWT signs
    /// with it is accepted, and the server warns at start.
    @Test func aShortSecretWorksAsOtherLibrariesSignWithItAndTheServerWarns() async throws {
        let python = try await runToExit(
            executable: URL(fileURLWithPath: "/usr/bin/env"),
            [
                "python3", "-c",
                "import jwt, time; print(jwt.encode({'sub': 'alice', 'carts': ['alice'], 'scope': 'read', 'exp': int(time.time()) + 600}, 's3cret', algorithm='HS256'))",
            ])
        guard python.status == 0 else {
            if ProcessInfo.processInfo.environment["CI"] != nil { Issue.record("PyJWT is missing: \(python.standardError)") }
            print("aShortSecretWorks… skipped: python3 with PyJWT is missing (pip install PyJWT)")
            return
        }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--jwt-secret", "s3cret"])
        let token = python.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        let list = try await CartCommandTests.client(["cart", "list", "--url", "http://127.0.0.1:\(server.port)", "--token", token])
        #expect(list.status == 0, "a PyJWT token with the short secret is accepted: \(list.error)")
        let forged = try await CartCommandTests.client(["cart", "list", "--url", "http://127.0.0.1:\(server.port)", "--token", token + "x"])
        #expect(forged.status != 0 && forged.error.contains("invalid_token"), "\(forged.error)")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        #expect(server.standardError.contains("under the 32 HS256 asks for"), "the server warns in its log: \(server.standardError)")
        #expect(!server.standardError.contains("s3cret"), "the secret is never logged")
        let warned = try await runToExit("fanout-server", ["token", "--jwt-secret", "s3cret", "--sub", "a", "--carts", "a"])
        #expect(warned.status == 0 && warned.standardError.contains("under the 32 HS256 asks for"), "\(warned.standardError)")
        #expect(!warned.standardError.contains("s3cret"), "the secret is never written out")
    }

    /// A --ttl no token can carry is a usage error that says so: it once printed an internal
    /// EncodingError for `1e308d`.
    @Test func aTTLNoTokenCanCarryIsAUsageError() async throws {
        for ttl in ["1e308d", "inf", "0", "-5m", "0.5s", "3651d", "soon"] {
            let refused = try await runToExit(
                "fanout-server", ["token", "--jwt-secret", Self.secret, "--sub", "a", "--carts", "a", "--ttl=\(ttl)"])
            #expect(refused.status == 64, "--ttl \(ttl): \(refused.status)")
            #expect(refused.standardError.contains("--ttl must be like"), "--ttl \(ttl): \(refused.standardError)")
            #expect(!refused.standardError.contains("EncodingError"), "--ttl \(ttl)")
        }
    }

    @Test func keysItCannotUseStopTheServerAtStartSayingWhy() async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let cases: [([String], String)] = [
            (["--jwt-key", "/nonexistent/key.pem"], "cannot read --jwt-key"),
            (["--jwt-key", database + ".pem"], "not a PEM public key"),
        ]
        try "not a key".write(toFile: database + ".pem", atomically: true, encoding: .utf8)
        for (arguments, message) in cases {
            let outcome = try await runToExit("fanout-server", ["--port", "0", "--db", database] + arguments)
            #expect(outcome.status != 0, "\(arguments)")
            #expect(outcome.standardError.contains(message), "\(arguments): \(outcome.standardError)")
        }
    }

    @Test(arguments: EndToEndTests.transports)
    func anExpiredTokenEndsTheSubscriptionAndTheClientSaysSo(transport: String) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await Self.server(database)
        // The token must outlive the client's start and its snapshot; on a loaded machine 2 s may
        // not, so a token that expired first is tried again with a longer life (it was refused at
        // the handshake and ended nothing).
        var subscribed: SubscribeProcess?
        for ttl in [2, 6, 20] where subscribed == nil {
            let minted = ContinuousClock.now
            let shortLived = try await Self.mint(["--sub", "alice", "--carts", "alice", "--ttl", "\(ttl)s"])
            let client = try await SubscribeProcess(port: server.port, arguments: ["--transport", transport, "--token", shortLived])
            await eventually(timeout: .seconds(ttl + 20), "the snapshot or the client's exit") {
                client.output.first?.type == "snapshot" || !client.process.isRunning
            }
            if client.output.first?.type == "snapshot" {
                subscribed = client
            } else if ContinuousClock.now - minted < .seconds(ttl) {
                Issue.record("the client stopped before its snapshot while its \(ttl) s token was still valid")
                return
            } else {
                print("anExpiredToken…: a \(ttl) s token expired before the client's snapshot; trying a longer one")
            }
        }
        guard let client = subscribed else {
            Issue.record("no token lived long enough for the client's snapshot")
            return
        }
        // At `exp` the server ends the subscription; the client, refused on its way back with
        // the same token (401 invalid_token), stops.
        #expect(await client.waitForExit(timeout: .seconds(30)), "the client gave up once its token expired")
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)/stats")!)
        request.setValue("Bearer \(Self.operatorToken)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        let stats = (try JSONSerialization.jsonObject(with: data)) as? [String: Any]
        #expect((stats?["ended"] as? [String: Any])?["tokenExpired"] as? Int == 1)
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }
}

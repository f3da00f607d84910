import FanoutClient
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import FanoutServer

/// `RemoteCartStore` with signed tokens: a provider's fresh token carries the replica across
/// each token's expiry, and a token's carts bound what it may observe.
@Suite("Remote cart store with signed tokens", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(2)))
struct RemoteStoreTokenTests {
    static let secret = "a client-test secret of at least 32 bytes"

    /// A token as a script gets one: `fanout-server token …` on stdout.
    static func mint(_ arguments: [String]) async throws -> String {
        let outcome = try await runToExit("fanout-server", ["token", "--jwt-secret", secret] + arguments)
        #expect(outcome.status == 0, "stderr: \(outcome.standardError)")
        return outcome.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(arguments: FanoutSubscription.Transport.allCases)
    func aProvidersFreshTokensCarryTheReplicaAcrossEachExpiry(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(["--token", "operator", "--jwt-secret", Self.secret])
        let writer = CartServerAPI(baseURL: server.url, credentials: .token("operator"))
        _ = try await writer.addItem("seed", quantity: 1, unitPriceCents: 1, to: "alice")
        let minted = NIOLockedValueBox(0)
        // Each connection gets a token that expires 3 s later, signed here as a shop's backend
        // signs one (minting it with `fanout-server token` took a process start, which on a
        // loaded machine spent most of the token's life before it was used: the store was then
        // refused until the test gave up waiting for "loaded").
        let store = RemoteCartStore(
            server: server.url, transport: transport,
            credentials: .provider {
                minted.withLockedValue { $0 += 1 }
                let token = UserToken(subject: "alice", carts: ["alice"], scope: "read", expiresAt: Date().addingTimeInterval(3))
                return try await TokenKeys.sign(token, secret: Self.secret)
            })
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["alice"]))
        await eventually("loaded", store: store, server: server) { recorder.isLoaded }
        let start = minted.withLockedValue { $0 }
        // Writes for longer than two tokens live.
        for index in 0..<70 {
            _ = try await writer.addItem("s\(index % 5)", quantity: 1, unitPriceCents: 1, to: "alice")
            try await Task.sleep(for: .milliseconds(100))
        }
        let log = try await server.log()
        let expected = recorder.expected(of: log, selection: .only(["alice"]))
        await eventually("every event", store: store, server: server) { recorder.events.count >= expected.count }
        #expect(recorder.events == expected, "nothing lost or repeated across the expiries")
        #expect(minted.withLockedValue { $0 } > start, "the provider was asked again after an expiry")
        #expect(recorder.record.withLockedValue { $0.resyncs.isEmpty })
        await server.stop()
    }

    @Test func aCartOutsideTheTokensClaimIsRefusedWithTheServersCode() async throws {
        let server = try await ServerUnderTest(["--jwt-secret", Self.secret])
        let alice = try await Self.mint(["--sub", "alice", "--carts", "alice", "--scope", "read", "--ttl", "1h"])
        let store = RemoteCartStore(server: server.url, credentials: .token(alice))
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["bob"]))
        await eventually("refused") {
            if case .refused = store.connectionState { true } else { false }
        }
        guard case .refused(let error) = store.connectionState else { return }
        #expect(error.code == .forbiddenCart, "\(error)")
        #expect(!recorder.isLoaded)
        await server.stop()
    }
}

import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import FanoutServer

/// A provider's signed tokens are refreshed in band, before each expires: a WebSocket sends
/// `refresh`, an event stream is handed over to one opened with the fresh token. Over ten token
/// lifetimes the store never leaves `live`, the server ends no subscriber for an expired token,
/// the others never see its presence leave, and every event comes once. (It was a 4003 close and
/// a reconnect at each expiry, and a leave and a join in "who is looking".)
@Suite("Tokens refreshed in band", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct TokenRefreshTests {
    static let secret = "a client-test secret of at least 32 bytes"

    @Test(arguments: FanoutSubscription.Transport.allCases)
    func tenTokenLifetimesPassWithoutAReconnectOrALeave(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(["--token", "operator", "--jwt-secret", Self.secret], leaseTTL: 10)
        let writer = CartServerAPI(baseURL: server.url, credentials: .token("operator"))
        _ = try await writer.addItem("seed", quantity: 1, unitPriceCents: 1, to: "alice")
        let lifetime: TimeInterval = 2
        let minted = NIOLockedValueBox(0)
        let store = RemoteCartStore(
            server: server.url, transport: transport,
            credentials: .provider {
                minted.withLockedValue { $0 += 1 }
                let token = UserToken(subject: "alice", carts: ["alice"], scope: "read", expiresAt: Date().addingTimeInterval(lifetime))
                return try await TokenKeys.sign(token, secret: Self.secret)
            },
            presence: .init(state: ["screen": "cart"]))
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["alice"]))
        let witnessStore = RemoteCartStore(server: server.url, credentials: .token("operator"), presence: .init())
        let witness = PresenceRecorder()
        witnessStore.observers.add(witness, carts: .only(["alice"]))
        let key = try #require(store.presenceKey)
        await eventually("loaded", store: store, server: server) { recorder.isLoaded }
        await eventually("the witness sees alice") { witness.members(of: "alice").contains { $0.member == key } }
        let statesBefore = recorder.record.withLockedValue { $0.states.count }
        let mintedBefore = minted.withLockedValue { $0 }

        // Writes for ten token lifetimes.
        let start = ContinuousClock.now
        var index = 0
        while ContinuousClock.now - start < .seconds(10 * lifetime) {
            _ = try await writer.addItem("s\(index % 5)", quantity: 1, unitPriceCents: 1, to: "alice")
            index += 1
            try await Task.sleep(for: .milliseconds(200))
        }
        let log = try await server.log()
        let expected = recorder.expected(of: log, selection: .only(["alice"]))
        await eventually("every event", store: store, server: server) { recorder.events.count >= expected.count }
        #expect(recorder.events == expected, "nothing lost or repeated")
        #expect(recorder.record.withLockedValue { $0.resyncs.isEmpty })
        let states = recorder.record.withLockedValue { Array($0.states.dropFirst(statesBefore)) }
        #expect(states.isEmpty, "the store stayed live: \(states)")
        #expect(minted.withLockedValue { $0 } - mintedBefore >= 9, "a fresh token for each lifetime")
        #expect(!witness.changes.contains { $0.change.leftMember == key }, "no leave: \(witness.changes.map(\.change))")
        let stats = try #require(await server.stats())
        let ended = (try JSONSerialization.jsonObject(with: Data(stats.utf8)) as? [String: Any])?["ended"] as? [String: Any]
        #expect((ended?["tokenExpired"] as? NSNumber)?.intValue == 0, "no subscriber ended for an expired token: \(stats)")
        await store.close()
        await witnessStore.close()
        await server.stop()
    }

    /// A provider that throws is the app's token backend's trouble, said as such (it read as
    /// "unreachable: connection lost"), and asked again.
    @Test func aFailingProviderIsItsOwnProblem() async throws {
        let server = try await ServerUnderTest(["--jwt-secret", Self.secret])
        struct TokenBackendDown: Error, CustomStringConvertible {
            var description: String { "token backend down" }
        }
        let asked = NIOLockedValueBox(0)
        let store = RemoteCartStore(
            server: server.url,
            credentials: .provider {
                asked.withLockedValue { $0 += 1 }
                throw TokenBackendDown()
            })
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["alice"]))
        await eventually("the problem said") {
            recorder.record.withLockedValue { record in
                record.states.contains {
                    if case .reconnecting(.credentialsUnavailable(let why)) = $0 { why == "token backend down" } else { false }
                }
            }
        }
        await eventually("asked again") { asked.withLockedValue { $0 } >= 2 }
        await store.close()
        await server.stop()
    }
}

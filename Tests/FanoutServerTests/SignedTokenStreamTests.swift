import FanoutTestSupport
import Foundation
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOWebSocket
import Testing

@testable import CartStore
@testable import FanoutServer

/// Signed tokens on `/subscribe`, over both transports: a subscription is of the token's carts
/// (snapshot, log and live events alike), a cart outside them is refused, and an open stream
/// ends when its token expires, unless a WebSocket refreshed it.
@Suite("Signed tokens on streams", .serialized, .timeLimit(.minutes(3)))
struct SignedTokenStreamTests {
    static func signedTokens(_ configuration: inout ServerConfiguration) {
        configuration.token = SignedTokenHTTPTests.operatorToken
        configuration.jwtSecret = Tokens.secret
    }

    static func carts(ofSnapshotIn messages: [ServerMessage]) -> [String] {
        messages.compactMap { if case .snapshot(let carts, _, _, _) = $0 { carts.map(\.id) } else { nil } }.flatMap { $0 }
    }

    @Test func aliceFollowsOnlyHerCartsOverAWebSocketAndAnAdminAllOfThem() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["alice", "alice-wishlist"], scope: "read")
        let admin = try await Tokens.hs256("admin", carts: ["*"], scope: "read")
        try await withServer(Self.signedTokens) { port, server in
            for cart in ["alice", "bob"] { _ = try await server.store.addItem(cartID: cart, sku: "seed", quantity: 1, unitPriceCents: 1) }
            let hers = TestSubscriber(port: port, path: "/subscribe?token=\(alice)")
            let all = TestSubscriber(port: port, headers: [.authorization: "Bearer \(admin)"])
            // Naming bob's cart on her open WebSocket: an error, and no subscription.
            try await hers.subscribe(carts: ["alice", "bob"])
            await eventually("forbidden_cart") { hers.errors == ["forbidden_cart"] }
            try await hers.subscribe()
            try await all.subscribe()
            await eventually("both snapshots") { !hers.snapshots.isEmpty && !all.snapshots.isEmpty }
            #expect(Self.carts(ofSnapshotIn: hers.messages) == ["alice"])
            #expect(Self.carts(ofSnapshotIn: all.messages).sorted() == ["alice", "bob"])
            for cart in ["bob", "alice-wishlist", "bob", "alice"] {
                _ = try await server.store.addItem(cartID: cart, sku: "apple", quantity: 1, unitPriceCents: 1)
            }
            await eventually("the admin's four events") { all.events.count == 4 }
            await eventually("her two events") { hers.events.count == 2 }
            #expect(hers.events.map(\.cartID) == ["alice-wishlist", "alice"])
            // Resuming from the log carries only her carts too.
            let resumed = TestSubscriber(port: port, path: "/subscribe?token=\(alice)")
            try await resumed.subscribe(since: 0)
            await eventually("her log") { resumed.events.count == 3 }
            #expect(resumed.events.map(\.cartID) == ["alice", "alice-wishlist", "alice"])
            #expect(all.events.map(\.cartID) == ["bob", "alice-wishlist", "bob", "alice"])
            for subscriber in [hers, all, resumed] { await subscriber.close() }
        }
    }

    @Test func refusedUpgradesAndStreamsSayWhyBeforeAnythingOpens() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["alice"])
        let expired = try await Tokens.hs256("alice", carts: ["alice"], expiresIn: -60)
        try await withServer({
            Self.signedTokens(&$0)
            RawWebSocketTests.quietLeases(&$0)
        }) { port, server in
            let badToken = try await onThreadOfItsOwn { try RawWebSocket(port: port).upgrade(path: "/subscribe?token=\(expired)") }
            #expect(badToken.head.hasPrefix("HTTP/1.1 401"))
            #expect(badToken.head.contains(#"WWW-Authenticate: Bearer error="invalid_token""#))
            #expect(badToken.body.contains(#""code":"invalid_token""#))
            #expect(badToken.body.contains("expired"))
            let stream = try await EventStreamClient(port: port, path: "/subscribe?token=\(alice)&carts=alice,bob")
            await eventually("the refusal") { stream.refusalBody != nil }
            #expect(stream.status == 403)
            #expect(stream.refusalBody?.contains(#""code":"forbidden_cart""#) == true)
            let writeOnly = try await Tokens.hs256("alice", carts: ["alice"], scope: "write")
            let cannotRead = try await onThreadOfItsOwn {
                try RawWebSocket(port: port).upgrade(path: "/subscribe?token=\(writeOnly)")
            }
            #expect(cannotRead.head.hasPrefix("HTTP/1.1 403"))
            #expect(cannotRead.body.contains(#""code":"insufficient_scope""#))
            let noToken = try await EventStreamClient(port: port, path: "/subscribe")
            await eventually("the refusal") { noToken.refusalBody != nil }
            #expect(noToken.status == 401)
            #expect(server.hub.stats.subscribers == 0)
        }
    }

    @Test func anEventStreamOfAliceCarriesOnlyHerCartsAndAnAdminsAllOfThem() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["alice", "alice-wishlist"], scope: "read")
        let admin = try await Tokens.hs256("admin", carts: ["*"], scope: "read")
        try await withServer(Self.signedTokens) { port, server in
            _ = try await server.store.addItem(cartID: "bob", sku: "seed", quantity: 1, unitPriceCents: 1)
            _ = try await server.store.addItem(cartID: "alice", sku: "seed", quantity: 1, unitPriceCents: 1)
            let stream = try await EventStreamClient(port: port, path: "/subscribe?token=\(alice)")
            let all = try await EventStreamClient(port: port, path: "/subscribe?carts=bob", headers: [("Authorization", "Bearer \(admin)")])
            await eventually("the snapshots") { !stream.snapshots.isEmpty && !all.snapshots.isEmpty }
            #expect(stream.snapshots.first?.data.contains(#""id":"bob""#) == false)
            #expect(stream.snapshots.first?.data.contains(#""id":"alice""#) == true)
            for cart in ["bob", "alice-wishlist", "bob"] {
                _ = try await server.store.addItem(cartID: cart, sku: "apple", quantity: 1, unitPriceCents: 1)
            }
            _ = try await server.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 1)
            await eventually("her events") { stream.cartEvents.count == 2 }
            #expect(stream.cartEvents.map(\.seq) == [4, 6])
            await eventually("bob's events, for the admin") { all.cartEvents.count == 2 }
            #expect(all.cartEvents.map(\.seq) == [3, 5])
            await stream.close()
            await all.close()
        }
    }

    @Test func openStreamsEndWhenTheirTokenExpiresAndAreCountedSo() async throws {
        try await withServer(Self.signedTokens) { port, server in
            // Minted once the server is up: its 4 s are for the two subscriptions, not the start
            // (with 2 s, a loaded machine once opened the stream after the token had expired:
            // refused at the door, never ended).
            let shortLived = try await Tokens.hs256("alice", carts: ["alice"], scope: "read", expiresIn: 4)
            let webSocket = TestSubscriber(port: port, path: "/subscribe?token=\(shortLived)")
            try await webSocket.subscribe()
            let stream = try await EventStreamClient(port: port, path: "/subscribe?token=\(shortLived)")
            await eventually("the stream's snapshot") { !stream.snapshots.isEmpty || stream.isClosed }
            #expect(!stream.snapshots.isEmpty, "refused: \(stream.refusalBody ?? "")")
            let close = try await webSocket.closeFrame()
            #expect(close?.closeCode == .unknown(FanoutCloseCode.tokenExpired.rawValue))
            await eventually(timeout: .seconds(10), "the stream to close") { stream.isClosed }
            let error = try #require(stream.events.last)
            #expect(error.name == "server-error")
            #expect(error.data.contains(#""code":"token_expired""#))
            await eventually("both counted") { server.hub.stats.ended["tokenExpired"] == 2 }
            #expect(server.hub.stats.transports["websocket"]?.ended["tokenExpired"] == 1)
            #expect(server.hub.stats.transports["sse"]?.ended["tokenExpired"] == 1)
            server.metrics.hub.show(server.hub.figures, waitingChanges: 0, gauges: .init(presenceMembers: (0, 0)))
            let metrics = String(decoding: server.metrics.exposition(), as: UTF8.self)
            #expect(metrics.contains(#"fanout_subscriber_ends_total{transport="websocket",reason="tokenExpired"} 1"#))
            #expect(metrics.contains(#"fanout_subscriber_ends_total{transport="sse",reason="tokenExpired"} 1"#))
        }
    }

    @Test func aWebSocketThatRefreshesInTimeGoesOnWithNothingLost() async throws {
        let expiresIn: TimeInterval = 3
        let first = try await Tokens.hs256("alice", carts: ["alice"], scope: "read", expiresIn: expiresIn)
        let firstExpiry = Date().addingTimeInterval(expiresIn)
        let fresh = try await Tokens.hs256("alice", carts: ["alice", "alice-wishlist"], scope: "read", expiresIn: 600)
        let bobs = try await Tokens.hs256("bob", carts: ["alice"], scope: "read", expiresIn: 600)
        let narrower = try await Tokens.hs256("alice", carts: ["alice-wishlist"], scope: "read", expiresIn: 600)
        try await withServer(Self.signedTokens) { port, server in
            let subscriber = TestSubscriber(port: port, path: "/subscribe?token=\(first)")
            try await subscriber.subscribe(carts: ["alice"])
            await eventually("the snapshot") { !subscriber.snapshots.isEmpty }
            // Another user's token, or one that does not cover the subscription: refused.
            try await subscriber.send(.refresh(token: bobs))
            try await subscriber.send(.refresh(token: narrower))
            try await subscriber.send(.refresh(token: "not a token"))
            await eventually("three refusals") { subscriber.errors.count == 3 }
            #expect(subscriber.errors == ["invalid_token", "forbidden_cart", "invalid_token"])
            try await subscriber.send(.refresh(token: fresh))
            _ = try await server.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 1)
            await eventually("the first event") { subscriber.events.count == 1 }
            // Past the first token's expiry the connection is open, and events keep coming.
            await eventually(timeout: .seconds(20), "the first token's expiry to pass") { Date() > firstExpiry.addingTimeInterval(1) }
            _ = try await server.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 1)
            await eventually("the second event") { subscriber.events.count == 2 }
            #expect(subscriber.events.map(\.seq) == [1, 2])
            #expect(subscriber.errors.count == 3, "the accepted refresh is not answered")
            #expect(server.hub.stats.ended["tokenExpired"] == 0)
            await subscriber.close()
        }
    }

    @Test func anEventStreamResumesWithAFreshTokenAndLastEventIDWithNothingLost() async throws {
        try await withServer(Self.signedTokens) { port, server in
            // Minted once the server is up: its 2 s are for the subscription, not the start.
            let shortLived = try await Tokens.hs256("alice", carts: ["alice"], scope: "read", expiresIn: 2)
            let stream = try await EventStreamClient(port: port, path: "/subscribe?token=\(shortLived)")
            await eventually("the snapshot") { !stream.snapshots.isEmpty }
            _ = try await server.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 1)
            await eventually("the first event") { stream.cartEvents.count == 1 }
            await eventually(timeout: .seconds(10), "the stream to end") { stream.isClosed }
            // Committed while it was away:
            _ = try await server.store.addItem(cartID: "alice", sku: "pear", quantity: 1, unitPriceCents: 1)
            _ = try await server.store.addItem(cartID: "bob", sku: "pear", quantity: 1, unitPriceCents: 1)
            let fresh = try await Tokens.hs256("alice", carts: ["alice"], scope: "read")
            let lastID = try #require(stream.lastEventID)
            let resumed = try await EventStreamClient(
                port: port, path: "/subscribe?token=\(fresh)", headers: [("Last-Event-ID", "\(lastID)")])
            _ = try await server.store.addItem(cartID: "alice", sku: "plum", quantity: 1, unitPriceCents: 1)
            await eventually("the events it missed, then the live one") { resumed.cartEvents.count == 2 }
            #expect(stream.cartEvents.map(\.seq) + resumed.cartEvents.map(\.seq) == [1, 2, 4])
            await resumed.close()
        }
    }

    @Test func noTokenIsEverLoggedEvenAtTrace() async throws {
        // Every line the server logs, at the most detailed level.
        let lines = RecentLogLines(capacity: .max)
        let logger = lines.logger(label: "fanout-test", level: .trace)
        let expired = try await Tokens.hs256("alice", carts: ["alice"], expiresIn: -60)
        let forged = try await Tokens.hs256("alice", carts: ["*"], secret: String(repeating: "f", count: 40))
        let tokens = NIOLockedValueBox([expired, forged, SignedTokenHTTPTests.operatorToken])
        try await withServer(Self.signedTokens, logger: logger) { port, server in
            // Minted once the server is up: its 2 s are for the two subscriptions, not the start.
            let valid = try await Tokens.hs256("alice", carts: ["alice"], expiresIn: 2)
            tokens.withLockedValue { $0.append(valid) }
            let webSocket = TestSubscriber(port: port, path: "/subscribe?token=\(valid)")
            try await webSocket.subscribe()
            try await webSocket.send(.refresh(token: forged))
            let stream = try await EventStreamClient(port: port, path: "/subscribe?token=\(valid)")
            for token in [expired, forged] {
                let refused = try await EventStreamClient(port: port, path: "/subscribe?token=\(token)")
                await eventually("the refusal") { refused.refusalBody != nil }
                _ = try? await onThreadOfItsOwn { try RawWebSocket(port: port).upgrade(path: "/subscribe?token=\(token)") }
            }
            _ = try await webSocket.closeFrame()
            await eventually(timeout: .seconds(10), "the stream's end") { stream.isClosed }
            #expect(server.hub.stats.ended["tokenExpired"] == 2)
        }
        let logged = lines.all
        #expect(!logged.isEmpty, "the server logged at trace")
        for token in tokens.withLockedValue({ $0 }) {
            // Any part of one: a signed token's signature is its last part.
            let secretPart = String(token.split(separator: ".").last ?? "")
            #expect(!logged.contains { $0.contains(secretPart) }, "a log line carries a token")
        }
    }

    /// A thousand event streams, each with a token for one or two of 250 carts: each receives
    /// exactly the events of its carts, and the fan-out counted one delivery per wanted event.
    @Test func aThousandSubscribersWithTokensEachReceiveExactlyTheirCartsEvents() async throws {
        let cartCount = 250
        let subscriberCount = 1_000
        try await withServer({
            Self.signedTokens(&$0)
            // Few heartbeats: a thousand streams' worth every 200 ms would load the machine
            // for every other test running meanwhile.
            $0.heartbeatInterval = .seconds(30)
            $0.leaseTTL = .seconds(120)
        }) { port, server in
            var streams: [(carts: Set<String>, client: EventStreamClient)] = []
            for index in 0..<subscriberCount {
                let carts: Set<String> =
                    index % 4 == 0 ? ["cart-\(index % cartCount)", "cart-\((index + 1) % cartCount)"] : ["cart-\(index % cartCount)"]
                let token = try await Tokens.hs256("user-\(index)", carts: Array(carts), scope: "read")
                streams.append((carts, try await EventStreamClient(port: port, path: "/subscribe?token=\(token)")))
            }
            await eventually(timeout: .seconds(60), "every stream live") { server.hub.stats.liveSubscribers == subscriberCount }
            var cartOfSeq: [Int64: String] = [:]
            for round in 0..<2 {
                for cart in 0..<cartCount {
                    let commit = try await server.store.addItem(
                        cartID: "cart-\(cart)", sku: "sku-\(round)", quantity: 1, unitPriceCents: 1)
                    cartOfSeq[commit.event.seq] = "cart-\(cart)"
                }
            }
            for (carts, client) in streams {
                let expected = cartOfSeq.filter { carts.contains($0.value) }.keys.sorted()
                await eventually(timeout: .seconds(60), "its \(expected.count) events") { client.cartEvents.count >= expected.count }
                #expect(client.cartEvents.compactMap(\.seq) == expected)
            }
            #expect(server.hub.stats.deliveries == streams.reduce(0) { $0 + 2 * $1.carts.count })
            for (_, client) in streams { await client.close() }
        }
    }
}

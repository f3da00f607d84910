import CartStore
import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import FanoutServer

/// Presence on one server: who is on a cart, over WebSocket and event streams, as each
/// subscriber sees it.
@Suite("Presence", .timeLimit(.minutes(2)))
struct PresenceTests {
    private static func id(_ key: String, user: String? = nil) -> PresenceMember.ID { .init(user: user, member: key) }

    @Test func twoMembersSeeEachOtherJoinChangeStateAndLeaveAtOnce() async throws {
        try await withServer { port, server in
            let ann = TestSubscriber(port: port)
            try await ann.subscribe(carts: ["a"], presence: PresenceRequest(key: "ann"))
            await eventually("ann's presence of a") { ann.members(of: "a").keys.contains(Self.id("ann")) }
            #expect(ann.presence.first?.kind == .presence, "the whole presence comes first")

            let bob = TestSubscriber(port: port)
            try await bob.subscribe(carts: ["a"], presence: PresenceRequest(key: "bob", state: ["editing": false]))
            await eventually("ann sees bob join") { ann.members(of: "a")[Self.id("bob")] != nil }
            await eventually("bob sees both") { Set(bob.members(of: "a").keys) == [Self.id("ann"), Self.id("bob")] }
            #expect(ann.members(of: "a")[Self.id("bob")]?.state == ["editing": false])

            try await bob.send(.presence(state: ["editing": true]))
            await eventually("ann sees bob's state") { ann.members(of: "a")[Self.id("bob")]?.state == ["editing": true] }
            await eventually("bob's own change comes back to him") { bob.members(of: "a")[Self.id("bob")]?.state == ["editing": true] }
            #expect(server.hub.presence.members(of: "a").map(\.member) == ["ann", "bob"], "oldest first")

            let closedAt = ContinuousClock.now
            await bob.close()
            await eventually("ann sees bob leave") { ann.members(of: "a")[Self.id("bob")] == nil }
            print(
                "a closed member left the others \((ContinuousClock.now - closedAt).formatted(.units(allowed: [.milliseconds]))) after its close"
            )
            // `closed`, not `lease_expired`: the close itself ended it, not the lease after it.
            let leave = ann.presence.last
            #expect(leave == .presenceLeave(cartID: "a", member: Self.id("bob"), reason: .closed))
            await ann.close()
            await eventually("nobody left") { server.hub.presence.members(of: "a").isEmpty }
        }
    }

    @Test func anEventStreamIsPresentAndLeavesWhenItsConnectionCloses() async throws {
        try await withServer { port, _ in
            let watcher = TestSubscriber(port: port)
            try await watcher.subscribe(carts: ["a"], presence: PresenceRequest(key: "watcher"))
            await eventually("the watcher's presence") { !watcher.members(of: "a").isEmpty }
            let state = "%7B%22editing%22%3Atrue%7D"  // {"editing":true}
            let stream = try await EventStreamClient(port: port, path: "/subscribe?carts=a&presenceKey=tab-1&presenceState=\(state)")
            await eventually("the stream's join") { watcher.members(of: "a")[Self.id("tab-1")]?.state == ["editing": true] }
            await eventually("the stream's own presence event") { stream.events.contains { $0.name == "presence" } }
            let presenceEvent = try #require(stream.events.first { $0.name == "presence" })
            #expect(presenceEvent.id == nil, "presence is not in the log: no id to resume after")
            #expect(presenceEvent.data.contains(#""member":"watcher""#) && presenceEvent.data.contains(#""member":"tab-1""#))
            await stream.close()
            await eventually("the stream's leave") { watcher.members(of: "a")[Self.id("tab-1")] == nil }
            #expect(watcher.presence.last == .presenceLeave(cartID: "a", member: Self.id("tab-1"), reason: .closed))
            await watcher.close()
        }
    }

    @Test func aReconnectWithItsKeyTakesTheMembershipOverWithoutALeaveOrAJoin() async throws {
        try await withServer { port, _ in
            let watcher = TestSubscriber(port: port)
            try await watcher.subscribe(carts: ["a"], presence: PresenceRequest(key: "watcher"))
            let first = TestSubscriber(port: port)
            try await first.subscribe(carts: ["a"], presence: PresenceRequest(key: "phone", state: ["screen": "cart"]))
            await eventually("the phone's join") { watcher.members(of: "a")[Self.id("phone")] != nil }
            let seen = watcher.presence.count

            // The phone changes networks: its old connection is still open when the new one comes.
            let second = TestSubscriber(port: port)
            try await second.subscribe(carts: ["a"], presence: PresenceRequest(key: "phone", state: ["screen": "checkout"]))
            await eventually("the new state") { watcher.members(of: "a")[Self.id("phone")]?.state == ["screen": "checkout"] }
            await first.close()
            // Something the watcher does see after the old connection's end: a third member.
            let third = TestSubscriber(port: port)
            try await third.subscribe(carts: ["a"], presence: PresenceRequest(key: "third"))
            await eventually("the third's join") { watcher.members(of: "a")[Self.id("third")] != nil }
            let between = Array(watcher.presence.dropFirst(seen))
            #expect(between.map(\.kind) == [.presenceUpdate, .presenceJoin], "no leave and no join of the phone: \(between)")

            await second.close()
            await eventually("the phone leaves with its last connection") { watcher.members(of: "a")[Self.id("phone")] == nil }
            await third.close()
            await watcher.close()
        }
    }

    @Test func aClientThatVanishesLeavesAtItsLeaseExpiry() async throws {
        // 3 s: a lease short enough to wait for, long enough for a loaded machine's heartbeats.
        try await withServer({ $0.leaseTTL = .seconds(3) }) { port, _ in
            let watcher = TestSubscriber(port: port)
            try await watcher.subscribe(carts: ["a"], presence: PresenceRequest(key: "watcher"))
            let silent = TestSubscriber(port: port)
            try await silent.subscribe(carts: ["a"], presence: PresenceRequest(key: "silent"))
            await eventually("the silent one's join") { watcher.members(of: "a")[Self.id("silent")] != nil }
            silent.stopHeartbeats()
            await eventually("its leave") { watcher.members(of: "a")[Self.id("silent")] == nil }
            #expect(watcher.presence.contains(.presenceLeave(cartID: "a", member: Self.id("silent"), reason: .leaseExpired)))
            #expect(watcher.members(of: "a")[Self.id("watcher")] != nil, "the heartbeating one stays")
            await silent.close()
            await watcher.close()
        }
    }

    @Test func refusedPresenceSaysWhyAndSubscribesToNothing() async throws {
        try await withServer({ $0.presenceMaxMembers = 1 }) { port, server in
            let first = TestSubscriber(port: port)
            try await first.subscribe(carts: ["a"], presence: PresenceRequest(key: "first"))
            await eventually("the first member") { !first.members(of: "a").isEmpty }
            let refusals: [(String, ClientMessage)] = [
                ("presence_full", .subscribe(carts: ["a"], since: nil, presence: PresenceRequest(key: "second"))),
                ("invalid_presence", .subscribe(carts: nil, since: nil, presence: PresenceRequest())),
                ("invalid_presence", .subscribe(carts: ["b"], since: nil, presence: PresenceRequest(key: "no spaces"))),
                (
                    "invalid_presence_state",
                    .subscribe(
                        carts: ["b"], since: nil, presence: PresenceRequest(state: ["note": .string(String(repeating: "x", count: 1_100))]))
                ),
                ("invalid_presence", .presence(state: ["editing": true])),
            ]
            for (code, message) in refusals {
                let other = TestSubscriber(port: port)
                await eventually("welcome") { other.messages.contains { $0.kind == .welcome } }
                try await other.send(message)
                await eventually("the \(code) refusal") { other.errors == [code] }
                #expect(other.snapshots.isEmpty, "nothing subscribed after \(code)")
                await other.close()
            }
            // Not objects: an array, and null (not the absence of a state, which is `{}`).
            for state in ["[1,2]", "null"] {
                let raw = TestSubscriber(port: port)
                await eventually("welcome") { raw.messages.contains { $0.kind == .welcome } }
                try await raw.sendRaw(.text(#"{"type":"subscribe","carts":["b"],"presence":{"state":"# + state + "}}"))
                await eventually("a state of \(state) refused") { raw.errors == ["invalid_presence_state"] }
                #expect(raw.snapshots.isEmpty)
                await raw.close()
            }
            #expect(server.hub.presence.members(of: "a").map(\.member) == ["first"])
            await first.close()
        }
    }

    @Test func stateChangesPastTheRateAreRefusedAndChangeNothing() async throws {
        try await withServer { port, _ in
            let member = TestSubscriber(port: port)
            try await member.subscribe(carts: ["a"], presence: PresenceRequest(key: "busy"))
            await eventually("joined") { !member.members(of: "a").isEmpty }
            for step in 0..<(PresenceLimits.maxStateChangesPerSecond + 5) {
                try await member.send(.presence(state: ["step": .number(Double(step))]))
            }
            await eventually("refusals") { member.errors.contains("presence_rate_limited") }
            let state = member.members(of: "a")[Self.id("busy")]?.state["step"]
            #expect(state != .number(Double(PresenceLimits.maxStateChangesPerSecond + 4)), "the refused ones changed nothing")
            await member.close()
        }
    }

    @Test func aTokenReadsAndFollowsThePresenceOfItsOwnCartsOnly() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["a"])
        try await withServer({ $0.jwtSecret = Tokens.secret }) { port, server in
            let member = TestSubscriber(port: port, headers: [.authorization: "Bearer \(alice)"])
            try await member.subscribe(carts: ["a"], presence: PresenceRequest(key: "k"))
            await eventually("alice's presence") { member.members(of: "a")[Self.id("k", user: "alice")] != nil }
            let intruder = TestSubscriber(port: port, headers: [.authorization: "Bearer \(alice)"])
            try await intruder.subscribe(carts: ["b"], presence: PresenceRequest(key: "k"))
            await eventually("refused") { intruder.errors == ["forbidden_cart"] }
            await intruder.close()
            let stream = try await EventStreamClient(port: port, path: "/subscribe?carts=b&presence=1&token=\(alice)")
            await eventually("the answer") { stream.status != nil }
            #expect(stream.status == 403)
            await stream.close()
            await member.close()
            #expect(server.hub.presence.members(of: "b").isEmpty)
        }
    }

    /// An event stream with presence on a full cart is answered 409 `presence_full` before the
    /// stream, as PROTOCOL.md says: it was a 200, a welcome, then the error and the end, and a
    /// browser's EventSource opened it again every second for as long as the cart was full. A
    /// member coming back with its own key is no new member, and is let in.
    @Test func anEventStreamToAFullCartIsRefused409BeforeTheStream() async throws {
        try await withServer({ $0.presenceMaxMembers = 1 }) { port, server in
            let member = try await EventStreamClient(port: port, path: "/subscribe?carts=a&presenceKey=first")
            await eventually("the first member") { server.hub.presence.members(of: "a").map(\.member) == ["first"] }
            for path in [
                "/subscribe?carts=a&presence=1", "/subscribe?carts=a&presenceKey=second", "/subscribe?carts=a,b&presenceKey=second",
            ] {
                let refused = try await EventStreamClient(port: port, path: path)
                await eventually("the refusal of \(path)") { refused.refusalBody != nil }
                #expect(refused.status == 409, "\(path)")
                #expect(refused.refusalBody?.contains("presence_full") == true, "\(path): \(refused.refusalBody ?? "")")
                #expect(refused.refusalBody?.contains("welcome") == false, "no stream began")
            }
            let sameKey = try await EventStreamClient(port: port, path: "/subscribe?carts=a&presenceKey=first")
            await eventually("its own key let in") { sameKey.status != nil }
            #expect(sameKey.status == 200)
            let withoutPresence = try await EventStreamClient(port: port, path: "/subscribe?carts=a")
            await eventually("a stream without presence") { withoutPresence.status != nil }
            #expect(withoutPresence.status == 200)
            #expect(server.hub.presence.members(of: "b").isEmpty)
            await sameKey.close()
            await withoutPresence.close()
            await member.close()
        }
    }

    @Test func getPresenceAnswersWhoIsThereWithTheCartsReadRules() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["a"])
        var configuration = ServerConfiguration()
        configuration.jwtSecret = Tokens.secret
        configuration.token = "operator"
        let server = try await buildApplication(configuration: configuration, store: try CartStore.inMemory(), logger: Logger(label: "t"))
        try await server.application.test(.router) { client in
            try await client.execute(uri: "/carts/a/presence", method: .get, headers: [.authorization: "Bearer \(alice)"]) {
                #expect($0.status == .ok)
                let body = try FanoutJSON.decoder().decode(PresenceResponse.self, from: Data(buffer: $0.body))
                #expect(body == PresenceResponse(cartID: "a", members: []), "a cart nobody is on is empty, never 404")
            }
            try await client.execute(uri: "/carts/b/presence", method: .get, headers: [.authorization: "Bearer \(alice)"]) {
                #expect($0.status == .forbidden)
                #expect(HTTPAPITests.errorCode($0.body) == "forbidden_cart")
            }
            try await client.execute(uri: "/carts/b/presence", method: .get) {
                #expect($0.status == .unauthorized)
            }
            try await client.execute(uri: "/carts/b%21/presence", method: .get, headers: [.authorization: "Bearer operator"]) {
                #expect(HTTPAPITests.errorCode($0.body) == "invalid_cart_id")
            }
        }
    }
}

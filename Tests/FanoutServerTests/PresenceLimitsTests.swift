import FanoutProtocol
import NIOCore
import Testing

@testable import FanoutServer

/// What one user may cost the others through presence: members per cart, and state changes a
/// second on a cart and by a user in all. One token with a thousand connections on one cart,
/// each changing its state once a second, once froze the server for a minute and cost every
/// subscriber its lease (a change goes to every follower of the cart). Time is the test's: each
/// change says when it is made.
@Suite("Presence limits")
struct PresenceLimitsTests {
    static func grant(_ name: String?) -> Grant {
        Grant(subject: name, carts: .all, mayRead: true, mayWrite: true, expiresAt: nil)
    }

    /// A subscriber of `user` present on `carts` with `key`; throws the refusal, if any.
    static func join(_ harness: HubHarness, _ user: String?, _ key: String, carts: Set<String> = ["hot"]) async throws -> Subscriber {
        let (subscriber, _) = try await harness.connect(grant: grant(user))
        try await harness.onLoop {
            try subscriber.subscribe(carts: carts, since: Int64?.none, presence: PresenceRequest(key: key))
        }
        return subscriber
    }

    static func refusal(_ body: () async throws -> Void) async -> FanoutError? {
        do {
            try await body()
            return nil
        } catch let error as FanoutError {
            return error
        } catch {
            Issue.record("not a FanoutError: \(error)")
            return nil
        }
    }

    @Test func oneUsersMembersOnACartAreBoundedAndNobodyElsesAre() async throws {
        var settings = FanoutHub.Settings(leaseTTL: HubHarness.lease)
        settings.presence.maxMembersPerUser = 3
        let harness = try HubHarness(settings)
        for index in 0..<3 { _ = try await Self.join(harness, "alice", "a\(index)") }
        let refused = await Self.refusal { _ = try await Self.join(harness, "alice", "a3") }
        #expect(refused?.code == .presenceFull)
        #expect(refused?.message.contains("this user has its maximum of 3 members") == true, "\(refused?.message ?? "")")
        // Her own key again is no new member; another user, anonymous members and another cart
        // are not hers to fill.
        _ = try await Self.join(harness, "alice", "a0")
        for index in 0..<3 { _ = try await Self.join(harness, "bob", "b\(index)") }
        for index in 0..<5 { _ = try await Self.join(harness, nil, "anonymous\(index)") }
        _ = try await Self.join(harness, "alice", "a3", carts: ["calm"])
        let members = harness.hub.presence.members(of: "hot")
        #expect(members.filter { $0.user == "alice" }.count == 3)
        #expect(members.count == 3 + 3 + 5)
    }

    @Test func stateChangesAreBoundedByUserAndByCartInAll() async throws {
        var settings = FanoutHub.Settings(leaseTTL: HubHarness.lease)
        settings.presence.maxUserChangesPerSecond = 5
        settings.presence.maxCartChangesPerSecond = 8
        let harness = try HubHarness(settings)
        var alice: [Subscriber] = []
        var bob: [Subscriber] = []
        for index in 0..<3 { alice.append(try await Self.join(harness, "alice", "a\(index)")) }
        for index in 0..<3 { bob.append(try await Self.join(harness, "bob", "b\(index)")) }
        let presence = harness.hub.presence
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
        func change(_ subscriber: Subscriber, _ step: Int, at time: NIODeadline) async -> FanoutError? {
            await Self.refusal { try presence.update(subscriber, state: ["step": .number(Double(step))], at: time) }
        }
        // Alice's five changes of this second, over her three subscriptions, then no more.
        for step in 0..<5 { #expect(await change(alice[step % 3], step, at: start + .milliseconds(Int64(step))) == nil) }
        let hers = await change(alice[0], 5, at: start + .milliseconds(10))
        #expect(
            hers?.code == .presenceRateLimited && hers?.message.contains("a user makes at most 5") == true, "\(String(describing: hers))")
        // Bob has his own; the cart takes eight in all.
        for step in 0..<3 { #expect(await change(bob[step], step, at: start + .milliseconds(20)) == nil) }
        let cartFull = await change(bob[0], 3, at: start + .milliseconds(30))
        #expect(
            cartFull?.code == .presenceRateLimited && cartFull?.message.contains("cart hot takes at most 8") == true,
            "\(String(describing: cartFull))")
        #expect(
            presence.members(of: "hot").first { $0.member == "b0" }?.state["step"] == .number(0), "a refused change changed nothing")
        // The next second takes changes again.
        #expect(await change(bob[0], 4, at: start + .seconds(1) + .milliseconds(20)) == nil)
        #expect(await change(alice[0], 6, at: start + .seconds(1) + .milliseconds(20)) == nil)
    }

    /// Each change goes to every follower: a cart of many followers takes fewer changes a
    /// second, so that its changes make at most `maxCartDeliveriesPerSecond` messages.
    @Test func aCartOfManyFollowersTakesFewerChangesASecond() async throws {
        var settings = FanoutHub.Settings(leaseTTL: HubHarness.lease)
        settings.presence.maxCartDeliveriesPerSecond = 12
        settings.presence.maxMembersPerUser = 10
        let harness = try HubHarness(settings)
        var members: [Subscriber] = []
        for index in 0..<4 { members.append(try await Self.join(harness, "u\(index)", "m")) }
        let presence = harness.hub.presence
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)
        // Four followers: 12 / 4 = 3 changes a second.
        for index in 0..<3 {
            #expect(await Self.refusal { try presence.update(members[index], state: ["n": .number(1)], at: start) } == nil)
        }
        let refused = await Self.refusal { try presence.update(members[3], state: ["n": .number(1)], at: start) }
        #expect(refused?.code == .presenceRateLimited)
        #expect(refused?.message.contains("at most 3 state changes a second now") == true, "\(String(describing: refused))")
        #expect(refused?.message.contains("4 followers") == true)
    }
}

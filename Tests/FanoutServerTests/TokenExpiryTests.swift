import CartStore
import FanoutTestSupport
import Foundation
import GRDB
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import FanoutServer

@Suite("Token expiry")
struct TokenExpiryTests {
    static func grant(_ subject: String = "alice", carts: Set<String> = ["alice"], expiresIn seconds: TimeInterval) -> Grant {
        Grant(subject: subject, carts: .only(carts), mayRead: true, mayWrite: false, expiresAt: Date().addingTimeInterval(seconds))
    }

    @Test func aSubscriberEndsWhenItsTokenExpiresAndIsCountedSo() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(60)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: Self.grant(expiresIn: 2))
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .milliseconds(1_900))
        #expect(transport.closedFor == nil)
        loop.advanceTime(by: .milliseconds(200))
        #expect(transport.closedFor == .tokenExpired)
        #expect(harness.hub.stats.ended["tokenExpired"] == 1)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func aRefreshForTheSameSubjectMovesTheDeadline() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(60)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: Self.grant(expiresIn: 2))
        harness.hub.connect(subscriber)
        // Someone else's token is refused (one that does not cover the subscription's carts
        // too: `SignedTokenStreamTests`).
        #expect(subscriber.refresh(with: Self.grant("bob", expiresIn: 60))?.code == .invalidToken)
        #expect(subscriber.refresh(with: Self.grant(carts: ["alice", "alice-wishlist"], expiresIn: 10)) == nil)
        loop.advanceTime(by: .seconds(5))
        #expect(transport.closedFor == nil, "refreshed until 10 s")
        loop.advanceTime(by: .seconds(6))
        #expect(transport.closedFor == .tokenExpired)
    }

    @Test func theOperatorsCredentialNeverExpires() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(3_600 * 48)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: .operator)
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .hours(47))
        #expect(transport.closedFor == nil)
        #expect(subscriber.refresh(with: Self.grant(expiresIn: 60))?.code == .invalidToken)
    }
}

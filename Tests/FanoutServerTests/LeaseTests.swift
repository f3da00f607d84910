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

@Suite("Leases")
struct LeaseTests {
    @Test func aLeaseLapsesOnlyAfterTheTTLWithoutASignOfLife() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(1)), loop: loop)
        let transport = RecordingTransport(loop: loop)
        let subscriber = Subscriber(loop: loop, hub: harness.hub, transport: transport, grant: .operator)
        harness.hub.connect(subscriber)
        loop.advanceTime(by: .milliseconds(900))
        subscriber.renewLease()
        loop.advanceTime(by: .milliseconds(900))
        #expect(transport.closedFor == nil, "heard 900 ms ago")
        loop.advanceTime(by: .milliseconds(99))
        #expect(transport.closedFor == nil)
        loop.advanceTime(by: .milliseconds(1))
        #expect(transport.closedFor == .leaseExpired)
        #expect(harness.hub.stats.expiries == 1)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func heartbeatingSubscribersKeepTheirLeasesAndOneThatStopsExpiresOnTime() throws {
        let loop = EmbeddedEventLoop()
        let harness = try HubHarness(.init(leaseTTL: .seconds(1)), loop: loop)
        let transports = (0..<20).map { _ in RecordingTransport(loop: loop) }
        let subscribers = transports.map { Subscriber(loop: loop, hub: harness.hub, transport: $0, grant: .operator) }
        for subscriber in subscribers { harness.hub.connect(subscriber) }
        // Ten seconds of heartbeats every 100 ms; the last subscriber stops after 5 s.
        for tick in 1...100 {
            loop.advanceTime(by: .milliseconds(100))
            for subscriber in subscribers.dropLast() { subscriber.renewLease() }
            if tick <= 50 { subscribers.last?.renewLease() }
            // It lapses one TTL after its last heartbeat, not before, and not at a later sweep.
            #expect((transports.last?.closedFor == .leaseExpired) == (tick >= 60), "at \(tick * 100) ms")
        }
        #expect(harness.hub.stats.subscribers == 19)
        #expect(transports.dropLast().allSatisfy { $0.closedFor == nil })
    }
}

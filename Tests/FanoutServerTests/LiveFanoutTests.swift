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

/// The live fan-out of one loop, with the test deciding when a connection has room.
@Suite("Live fan-out")
struct LiveFanoutTests {
    /// Commits an event as the store would announce it.
    static func commit(_ harness: HubHarness, seq: Int64, cart: String = "c") {
        let event = CartEvent(seq: seq, cartID: cart, change: .cartCleared, version: seq, committedAt: Date())
        harness.hub.cartStore(harness.store, didCommit: event)
    }

    /// What was written since the last call, once the loop has run its passes.
    static func written(_ harness: HubHarness, _ transport: RecordingTransport) async throws -> [Int64] {
        try await harness.onLoop {
            defer { transport.written.removeAll() }
            return try transport.seqs()
        }
    }

    static func setWritable(_ writable: Bool, _ harness: HubHarness, _ transport: RecordingTransport) async throws {
        try await harness.onLoop {
            transport.isWritable = writable
            if writable { harness.hub.fanout(for: harness.loop).drained() }
        }
    }

    @Test func aFullConnectionIsSkippedAndCarriesOnWhenItDrains() async throws {
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 100))
        let (_, transport) = try await harness.live(carts: ["c"])
        Self.commit(harness, seq: 1)
        #expect(try await Self.written(harness, transport) == [1])
        try await Self.setWritable(false, harness, transport)
        for seq in Int64(2)...6 { Self.commit(harness, seq: seq, cart: seq == 4 ? "other" : "c") }
        #expect(try await Self.written(harness, transport) == [], "nothing is written while the connection is full")
        // No later event: draining alone must bring the rest, in order, without the other cart.
        try await Self.setWritable(true, harness, transport)
        #expect(try await Self.written(harness, transport) == [2, 3, 5, 6])
        #expect(harness.hub.stats.liveSubscribers == 1)
        #expect(harness.hub.stats.slowConsumerDrops == 0)
    }

    @Test func aConnectionThatClosesWhileItIsFlushedLeavesTheFanOut() async throws {
        let harness = try HubHarness()
        let (subscriber, transport) = try await harness.live()
        try await harness.onLoop { transport.onFlush = { subscriber.end(.peerClosed) } }
        Self.commit(harness, seq: 1)
        try await eventually("ended") { try await harness.onLoop { subscriber.isEnded } }
        #expect(harness.hub.stats.liveSubscribers == 0)
        Self.commit(harness, seq: 2)  // a pass with nobody left
        #expect(try await Self.written(harness, transport) == [1])
        #expect(harness.hub.stats.ended["peerClosed"] == 1)
    }

    @Test func aSubscriberThatFallsOutOfTheRingIsDroppedAsTooSlow() async throws {
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 4))
        let (_, transport) = try await harness.live()
        try await Self.setWritable(false, harness, transport)
        for seq in Int64(1)...4 { Self.commit(harness, seq: seq) }
        #expect(try await harness.onLoop { transport.closedFor } == nil, "4 behind is within the limit")
        Self.commit(harness, seq: 5)
        try await eventually("dropped") { try await harness.onLoop { transport.closedFor == .tooSlow } }
        #expect(harness.hub.stats.slowConsumerDrops == 1)
        #expect(harness.hub.stats.liveSubscribers == 0)
        #expect(harness.hub.stats.subscribers == 0)
    }

    @Test func aStuckSubscriberDoesNotMakeEveryPassReadItsBacklog() async throws {
        // A lease far longer than the test: under a full run's load its 200 passes took over
        // the default 15 s once, and the stuck subscriber's lease lapsed.
        let harness = try HubHarness(.init(leaseTTL: HubHarness.lease, ringCapacity: 1_000))
        let (_, stuck) = try await harness.live()
        let (_, reader) = try await harness.live()
        try await Self.setWritable(false, harness, stuck)
        var received: [Int64] = []
        for seq in Int64(1)...200 {
            Self.commit(harness, seq: seq)
            // Each pass reaches the reader (on a loaded machine the pass may come after the
            // first look): every event once, in order, while the stuck one holds its backlog.
            try await eventually("event \(seq) written to the reader") {
                received += try await Self.written(harness, reader)
                return received.last == seq
            }
        }
        #expect(received == Array(1...200))
        #expect(try await harness.onLoop { stuck.closedFor } == nil)
    }

    @Test func heartbeatsGoOnlyToSubscribersThatHaveEverythingTheyAnnounce() async throws {
        let harness = try HubHarness()
        let (_, current) = try await harness.live()
        let (_, behind) = try await harness.live()
        try await Self.setWritable(false, harness, behind)
        Self.commit(harness, seq: 1)
        _ = try await Self.written(harness, current)
        try await harness.onLoop { behind.isWritable = true }  // room again, but not yet drained
        harness.hub.heartbeat()
        let heard = try await harness.onLoop { (try current.messages(), try behind.messages()) }
        #expect(heard.0 == [.heartbeat(latestSeq: 1)])
        // Its pass comes first: the event, then the heartbeat that says it has it.
        #expect(heard.1 == [try #require(heard.1.first), .heartbeat(latestSeq: 1)])
        if case .event(let event) = heard.1.first { #expect(event.seq == 1) } else { Issue.record("the event first") }
    }

    @Test func aHeartbeatIntervalsSlicesReachEverySubscriberOnceAndATenthAtATime() async throws {
        let harness = try HubHarness()
        var opened: [RecordingTransport] = []
        for _ in 0..<25 { opened.append(try await harness.live().1) }
        let transports = opened
        var heard = Array(repeating: 0, count: transports.count)
        for slice in 0..<HeartbeatSlices.count {
            harness.hub.heartbeat(slice: slice)
            let now = try await harness.onLoop {
                try transports.map { transport in
                    defer { transport.written.removeAll() }
                    return try transport.messages().filter { $0 == .heartbeat(latestSeq: 0) }.count
                }
            }
            // One write per subscriber of a slice: 25 subscribers dealt to 10 slices, 2 or 3 each.
            #expect((2...3).contains(now.reduce(0, +)), "slice \(slice)")
            for (index, count) in now.enumerated() { heard[index] += count }
        }
        #expect(heard == Array(repeating: 1, count: transports.count), "each subscriber once an interval")
    }

    @Test func theRingHoldsNoGapAndNoEventTwice() {
        func bytes(_ seq: Int64) -> EventBytes {
            EventBytes(CartEvent(seq: seq, cartID: "c", change: .cartCleared, version: seq, committedAt: Date()))
        }
        // The hub read the newest seq (2), then 3 reached it; 4 was delivered before it listened.
        let ring = LiveRing(capacity: 8, latestSeq: 2)
        #expect(!ring.append(bytes(2)), "committed before the ring started")
        #expect(ring.append(bytes(3)))
        #expect(ring.append(bytes(5)))
        #expect(ring.items(after: 0).map(\.seq) == [5], "4 never came: what came before it is forgotten")
        #expect(!ring.covers(3), "a reader at 3 must read 4 from the log")
        #expect(ring.covers(4))
        #expect(ring.newestSeq == 5)
    }

    @Test func aLiveSubscriberIsNotSkippedPastAnEventTheRingNeverGot() async throws {
        let harness = try HubHarness()
        let (_, transport) = try await harness.live()
        Self.commit(harness, seq: 1)
        #expect(try await Self.written(harness, transport) == [1])
        Self.commit(harness, seq: 3)
        // Ended, so that it resumes from the log with since=1 and gets 2 there.
        try await eventually("ended") { try await harness.onLoop { transport.closedFor == .tooSlow } }
        #expect(try await Self.written(harness, transport) == [])
    }
}

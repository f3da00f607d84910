import Clocks
import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// An app's life around its store: `suspend()` when it goes to the background, `resume()` when
/// it is back, `retryNow()` when the network changes.
@Suite("Remote cart store: suspend, resume, retry now", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct RemoteStoreAppLifecycleTests {
    /// Suspended: the writes made just before reach the server, the connection closes (its
    /// presence leaves as closed), the carts stay. Resumed: it connects at once and catches up
    /// after its seq, nothing lost, nothing twice, no resync, and sends the write made meanwhile.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func suspendKeepsTheCartsAndResumeCatchesUp(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(leaseTTL: 10)
        await server.add("alice", "seed")
        let store = RemoteCartStore(server: server.url, transport: transport, presence: .init())
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["alice"]))
        let witnessStore = RemoteCartStore(server: server.url, presence: .init())
        let witness = PresenceRecorder()
        witnessStore.observers.add(witness, carts: .only(["alice"]))
        let key = try #require(store.presenceKey)
        await eventually("loaded", store: store, server: server) { recorder.isLoaded }
        await eventually("the witness sees the store") { witness.members(of: "alice").contains { $0.member == key } }

        // Going to the background right after three writes: they are sent before it closes.
        var writes: [PendingWrite] = []
        for index in 0..<3 { writes.append(try await store.addItem("s\(index)", quantity: 1, unitPriceCents: 1, to: "alice")) }
        await store.suspend()
        for write in writes {
            guard case .confirmed = await store.outcome(of: write) else {
                Issue.record("\(write.id) was not confirmed before the connection closed")
                continue
            }
        }
        #expect(store.connectionState == .suspended)
        #expect(recorder.record.withLockedValue { $0.states.last } == .suspended)
        await eventually("its presence leaves, as closed") {
            witness.changes.contains { $0.change.leftMember == key && $0.change.leaveReason == .closed }
        }
        #expect(await server.subscribers() == 1, "the witness alone")
        #expect(store.cart("alice")?.items.count == 4, "the carts stay while suspended")

        // Meanwhile: another client's changes, and one of the app's (kept, not sent).
        await server.add("alice", "while-away-1")
        await server.add("alice", "while-away-2")
        let meanwhile = try await store.addItem("meanwhile", quantity: 1, unitPriceCents: 1, to: "alice")
        #expect(await server.subscribers() == 1, "no connection while suspended")

        store.resume()
        guard case .confirmed(let seq) = await store.outcome(of: meanwhile) else {
            Issue.record("the write made while suspended was not sent on resume")
            return
        }
        await store.applied(through: seq)
        let log = try await server.log()
        let expected = recorder.expected(of: log, selection: .only(["alice"]))
        #expect(recorder.events == expected, "every event once, in order")
        #expect(recorder.record.withLockedValue { $0.resyncs.isEmpty }, "resumed after its seq, not resynced")
        #expect(store.connectionState == .live)
        #expect(store.cart("alice")?.items.map(\.sku).sorted() == ["meanwhile", "s0", "s1", "s2", "seed", "while-away-1", "while-away-2"])
        await store.close()
        await witnessStore.close()
        await server.stop()
    }

    /// `retryNow()` ends the pause before the next attempt: with the store's clock standing
    /// still, a server back up is reached only when asked to try now. A live store is left alone.
    @Test func retryNowEndsThePauseAndLeavesALiveConnectionAlone() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let clock = TestClock()
        let store = RemoteCartStore(server: server.url, releaseCheckInterval: .seconds(86_400), clock: clock)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["a"]))
        await eventually("live", store: store, server: server) { store.connectionState == .live }
        store.retryNow()
        #expect(store.connectionState == .live)

        await server.halt()
        await eventually("reconnecting, pausing on its clock", store: store, server: nil) {
            if case .reconnecting = store.connectionState { await RemoteCartStoreTests.isWaiting(on: clock) } else { false }
        }
        try await server.start()
        #expect(await server.subscribers() == 0, "the clock has not moved: still pausing")
        store.retryNow()
        await eventually("live at once, the clock unmoved", store: store, server: server) { store.connectionState == .live }
        let states = recorder.record.withLockedValue { $0.states }
        #expect(states.filter { $0 == .live }.count == 2, "one reconnect, for the server's stop: \(states)")
        await store.close()
        await server.stop()
    }
}

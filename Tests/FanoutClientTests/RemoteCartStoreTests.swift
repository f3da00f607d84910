import CartStore
import Clocks
import Dispatch
import FanoutClient
import FanoutConcurrency
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

/// `RemoteCartStore` against a real `fanout-server` process: the replica, the observers, and
/// interest that follows them.
@Suite("Remote cart store", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct RemoteCartStoreTests {
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func anObserverGetsItsCartsThenEachOfTheirEventsOnceInOrder(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest()
        for index in 0..<3 { await server.add("k\(index)", "seed") }
        let store = RemoteCartStore(server: server.url, transport: transport)
        let recorder = Recorder(queue: DispatchQueue(label: "observer"))
        let selection = CartSelection.only(["k0", "k1"])
        store.observers.add(recorder, carts: selection, queue: recorder.queue)
        await eventually("loaded") { recorder.isLoaded }
        #expect(recorder.record.withLockedValue { $0.loaded?.map(\.id) } == ["k0", "k1"])

        _ = await Mutations.burst(port: { server.port }, writers: 3, each: 40, tag: "k")
        let log = try await server.log()
        let expected = recorder.expected(of: log, selection: selection)
        #expect(expected.count == 80)
        await eventually("every event of k0 and k1") { recorder.events.count >= expected.count }
        #expect(recorder.events == expected, "each event of the observed carts once, in seq order")
        let remote = try await server.carts()
        #expect(store.cart("k0") == remote["k0"] && store.cart("k1") == remote["k1"], "the replica equals GET /carts")
        #expect(store.cart("k2") == nil, "an unobserved cart is not held")
        let record = recorder.record.withLockedValue { $0 }
        #expect(record.offQueue == 0, "every callback on the observer's queue")
        #expect(record.loads == 1 && record.resyncs.isEmpty)
        withExtendedLifetime(recorder) {}
        await server.stop()
    }

    /// 1 000 observers over 50 carts, each wanting one to three of them (every tenth: all),
    /// through a server restart and a SIGKILL mid-burst.
    @Test func aThousandObserversEachReceiveExactlyTheLogOfTheirCarts() async throws {
        let server = try await ServerUnderTest(kind: .process)
        let carts = (0..<50).map { "c\($0)" }
        for cart in carts { await server.add(cart, "seed") }
        let store = RemoteCartStore(server: server.url)
        let queues = (0..<8).map { DispatchQueue(label: "observers-\($0)") }
        let observers: [(Recorder, CartSelection)] = (0..<1_000).map { index in
            let selection: CartSelection =
                index % 10 == 0 ? .all : .only((0...(index % 3)).map { carts[(index * 7 + $0 * 11) % carts.count] })
            let queue = index % 2 == 0 ? queues[index % queues.count] : nil
            return (Recorder(queue: queue), selection)
        }
        for (recorder, selection) in observers { store.observers.add(recorder, carts: selection, queue: recorder.queue) }
        await eventually(timeout: .seconds(30), "every observer loaded") { observers.allSatisfy { $0.0.isLoaded } }

        let writes = Task {
            await withTaskGroup(of: Void.self) { group in
                for writer in 0..<4 {
                    group.addTask {
                        // Each write until it is acknowledged: a restart refuses some.
                        for index in 0..<150 {
                            while await server.add(carts[(writer * 13 + index) % carts.count], "w\(writer)-\(index % 5)") == nil {
                                try? await Task.sleep(for: .milliseconds(20))
                            }
                        }
                    }
                }
            }
        }
        await eventually("part of the burst") { (try? await server.log().count) ?? 0 >= 150 }
        try await server.restart()
        await eventually("more of the burst") { (try? await server.log().count) ?? 0 >= 350 }
        await server.crash()
        try await server.start()
        await writes.value
        await server.add("c0", "last")

        let log = try await server.log()
        #expect(log.map(\.seq) == Array(1...Int64(log.count)), "the log has no gap")
        for (recorder, selection) in observers {
            let expected = recorder.expected(of: log, selection: selection)
            await eventually(timeout: .seconds(30), "an observer caught up") { recorder.events.count >= expected.count }
            #expect(recorder.events == expected, "exactly the events of its carts, in order, once")
            #expect(recorder.record.withLockedValue { $0.offQueue } == 0)
        }
        let remote = try await server.carts()
        #expect(store.carts == remote.values.sorted { $0.id < $1.id }, "the replica equals GET /carts")
        await server.stop()
    }

    /// Adds an observer of `cart` that only the test holds, waits until it is loaded and the
    /// server counts the subscriber, then releases it (checking that the store did not keep it).
    static func observeThenRelease(_ cart: String, of store: RemoteCartStore, on server: ServerUnderTest) async throws {
        var recorder: Recorder? = Recorder()
        weak let released = recorder
        store.observers.add(recorder!, carts: .only([cart]))
        await eventually("loaded") { released?.isLoaded == true }
        await eventually("the server counts the subscriber") { await server.subscribers() == 1 }
        recorder = nil
        #expect(released == nil, "the store holds its observers weakly")
    }

    /// The release check runs on the store's clock: a released observer is seen at the next
    /// check, not before, and its connection then closes.
    @Test func releasingEveryObserverClosesTheConnectionAtTheNextReleaseCheck() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let clock = TestClock()
        let store = RemoteCartStore(server: server.url, releaseCheckInterval: .seconds(10), clock: clock)
        try await Self.observeThenRelease("a", of: store, on: server)
        await eventually("the release check waits on the store's clock") { await Self.isWaiting(on: clock) }
        await clock.advance(by: .seconds(9))
        #expect(store.replica.loopState == .following(.only(["a"])), "released, but not looked for before the check")
        #expect(await server.subscribers() == 1)
        await clock.advance(by: .seconds(1))
        await eventually("the subscriber leaves the server", store: store, server: server) { await server.subscribers() == 0 }
        // The server may see the connection close a moment before the store says so.
        await eventually("the store idle") { store.connectionState == .idle }
        #expect(store.cart("a") == nil)

        // A new observer opens it again.
        let again = Recorder()
        store.observers.add(again, carts: .only(["a"]))
        await eventually("loaded again") { again.isLoaded }
        #expect(again.record.withLockedValue { $0.loaded?.first?.version } == 1)
        await server.stop()
    }

    /// Whether something sleeps on `clock` now.
    static func isWaiting(on clock: TestClock<Duration>) async -> Bool {
        do {
            try await clock.checkSuspension()
            return false
        } catch {
            return true
        }
    }

    /// The pause before the subscription tries again runs on the store's clock: a server back
    /// up is not reached before the pause has passed, and is at once when it has.
    @Test func aStoreTriesAgainWhenItsPauseHasPassedOnItsClock() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        await server.halt()
        let clock = TestClock()
        let store = RemoteCartStore(server: server.url, releaseCheckInterval: .seconds(86_400), clock: clock)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["a"]))
        await eventually("the first attempt failed", store: store, server: nil) {
            if case .reconnecting = store.connectionState { true } else { false }
        }
        try await server.start()
        #expect(await server.subscribers() == 0, "the store pauses on its clock, which has not moved")
        #expect(!recorder.isLoaded)
        // Past the longest pause (5 s), as often as it takes the loop to be asleep on the clock.
        await eventually("live once the pause has passed", store: store, server: server) {
            await clock.advance(by: .seconds(5))
            return store.connectionState == .live
        }
        await eventually("loaded", store: store, server: server) { recorder.isLoaded }
        #expect(recorder.record.withLockedValue { $0.loaded?.first?.version } == 1)
        await store.close()
        await server.stop()
    }

    /// A released event stream leaves the server as soon as the store drops it, as a WebSocket
    /// does: not at the server's next heartbeat (30 s here, far beyond the wait).
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func aReleasedStoreLeavesTheServerAtOnce(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(heartbeatInterval: 30, leaseTTL: 60)
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url, transport: transport, releaseCheckInterval: .milliseconds(100))
        try await Self.observeThenRelease("a", of: store, on: server)
        await eventually(timeout: .seconds(3), "the subscriber leaves the server") { await server.subscribers() == 0 }
        await server.stop()
    }

    @Test func releasingTheOnlyObserversOfACartNarrowsWhatIsReceivedAndTheOthersLoseNothing() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        await server.add("b", "seed")
        let store = RemoteCartStore(server: server.url, releaseCheckInterval: .milliseconds(200))
        var ofA: Recorder? = Recorder()
        let ofB = Recorder()
        store.observers.add(ofA!, carts: .only(["a"]))
        store.observers.add(ofB, carts: .only(["b"]))
        await eventually("loaded") { ofA?.isLoaded == true && ofB.isLoaded }

        let writes = Task {
            for index in 0..<60 {
                await server.add("a", "s\(index % 4)")
                await server.add("b", "s\(index % 4)")
            }
        }
        await eventually("some events") { ofB.events.count >= 10 }
        ofA = nil
        await eventually("the replica let go of a") { store.cart("a") == nil }
        await writes.value
        let log = try await server.log()
        let expected = ofB.expected(of: log, selection: .only(["b"]))
        await eventually("every event of b") { ofB.events.count >= expected.count }
        #expect(ofB.events == expected, "the observer of b lost and repeated nothing across the narrowing")
        #expect(store.cart("b") == (try await server.carts())["b"])
        await server.stop()
    }

    @Test func anObserverAddedMidBurstGetsTheCurrentCartsThenLaterEventsOnly() async throws {
        let server = try await ServerUnderTest()
        await server.add("k0", "seed")
        let store = RemoteCartStore(server: server.url)
        let early = Recorder()
        store.observers.add(early, carts: .only(["k0"]))
        await eventually("loaded") { early.isLoaded }
        let burst = Task { await Mutations.burst(port: { server.port }, writers: 2, each: 80, tag: "k") }
        await eventually("part of the burst") { early.events.count >= 20 }
        // Mid-burst: one for carts the replica holds, one for a cart it must widen to.
        let late = Recorder(queue: DispatchQueue(label: "late"))
        store.observers.add(late, carts: .only(["k0", "k1"]), queue: late.queue)
        _ = await burst.value
        await eventually("the late observer loaded") { late.isLoaded }
        let log = try await server.log()
        let expected = late.expected(of: log, selection: .only(["k0", "k1"]))
        await eventually("its events") { late.events.count >= expected.count }
        #expect(late.events == expected, "after the state it was given: every later event once, none before")
        // Its first state and its events make the carts as the server has them.
        var carts = Dictionary(uniqueKeysWithValues: (late.record.withLockedValue { $0.loaded } ?? []).map { ($0.id, $0) })
        for event in late.events { carts[event.cartID, default: Cart(id: event.cartID)].apply(event) }
        let remote = try await server.carts()
        #expect(carts["k0"] == remote["k0"] && carts["k1"] == remote["k1"])
        await server.stop()
    }

    @Test func anObserverRemovedOrReleasedInItsCallbackGetsNothingAfter() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url)
        let remover = Recorder(queue: DispatchQueue(label: "remover")) { recorder, store, count in
            if count == 3 {
                store.observers.remove(recorder)
                recorder.stopped.withLockedValue { $0 = true }
            }
        }
        let control = Recorder()
        store.observers.add(remover, carts: .only(["a"]), queue: remover.queue)
        store.observers.add(control, carts: .only(["a"]))
        await eventually("loaded") { remover.isLoaded && control.isLoaded }
        for index in 0..<10 { await server.add("a", "s\(index)") }
        await eventually("the control got them all") { control.events.count == 10 }
        // Whatever was queued for it after the removal is dropped.
        remover.queue?.sync {}
        #expect(remover.events.count == 3)
        #expect(remover.record.withLockedValue { $0.afterStop } == 0)
        await server.stop()
    }

    @Test func aServerThatLostItsDataResyncsTheReplicaWithTheReason() async throws {
        let server = try await ServerUnderTest()
        for index in 0..<5 { await server.add("a", "s\(index)") }
        let store = RemoteCartStore(server: server.url)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .all)
        await eventually("loaded") { recorder.isLoaded }
        #expect(store.seq == 5)

        // Another database on the same address: its log ends before the replica's seq.
        let (other, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let fresh = try CartStore(path: other)
        try await fresh.addItem(cartID: "b", sku: "fresh", quantity: 1, unitPriceCents: 1)
        try fresh.close()
        try await server.restart(database: other)
        await eventually("resynced") { !recorder.record.withLockedValue { $0.resyncs.isEmpty } }
        let resync = recorder.record.withLockedValue { $0.resyncs.first }
        #expect(resync?.0 == .otherDatabase)
        #expect(resync?.1.map(\.id) == ["b"], "the replica is the new server's carts")
        #expect(store.cart("a") == nil && store.cart("b")?.version == 1)
        await server.stop()
    }

    @Test func aPrunedLogResyncsTheReplicaWithTheReason() async throws {
        let server = try await ServerUnderTest(["--ring-size", "16"])
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["a"]))
        await eventually("loaded") { recorder.isLoaded }

        // While the server is down, 40 events are written and all but the last 5 pruned.
        try await server.pruneWhileDown("a", writing: 40, keeping: 5)

        await eventually("resynced") { !recorder.record.withLockedValue { $0.resyncs.isEmpty } }
        let resync = recorder.record.withLockedValue { $0.resyncs.first }
        #expect(resync?.0 == .historyPruned)
        #expect(resync?.1.first?.version == 41)
        #expect(store.cart("a") == (try await server.carts())["a"])
        await server.stop()
    }

    @Test func aRefusedTokenIsReportedOnceAndNotRetriedInALoop() async throws {
        let server = try await ServerUnderTest(["--token", "right"])
        let store = RemoteCartStore(server: server.url, credentials: .token("wrong"))
        let recorder = Recorder()
        store.observers.add(recorder)
        await eventually("refused") {
            recorder.record.withLockedValue { $0.states.contains { if case .refused = $0 { true } else { false } } }
        }
        guard case .refused(let error) = store.connectionState else {
            Issue.record("not refused: \(store.connectionState)")
            return
        }
        #expect(error.code == .badToken)

        // The subscription under it asks once, then waits out its pause (on its clock), and
        // asks again only when that has passed: not a retry storm.
        let attempts = NIOLockedValueBox(0)
        let refusals = NIOLockedValueBox<[Duration]>([])
        let subscription = FanoutSubscription(server: server.url, credentials: .token("wrong"))
        let clock = TestClock()
        let run = Task {
            try await subscription.run(
                plan: { .init(carts: nil, since: nil) }, wakeUps: WakeUps(), presenceStates: nil, clock: clock
            ) { update in
                switch update {
                case .connecting: attempts.withLockedValue { $0 += 1 }
                case .refused(_, let retryIn): refusals.withLockedValue { $0.append(retryIn) }
                default: break
                }
            }
        }
        await eventually("refused, and pausing on its clock") { await Self.isWaiting(on: clock) && !refusals.withLockedValue(\.isEmpty) }
        #expect(refusals.withLockedValue { $0 } == [FanoutSubscription.refusalPause], "the long pause of credentials refused")
        await clock.advance(by: FanoutSubscription.refusalPause - .milliseconds(1))
        #expect(await Self.isWaiting(on: clock) && attempts.withLockedValue { $0 } == 1, "no attempt before the pause has passed")
        await clock.advance(by: .milliseconds(1))
        await eventually("asked again once the pause has passed") { attempts.withLockedValue { $0 } == 2 }
        run.cancel()
        // With the right token a new store goes live.
        let good = RemoteCartStore(server: server.url, credentials: .provider { "right" })
        let other = Recorder()
        good.observers.add(other)
        await eventually("live") { good.connectionState == .live && other.isLoaded }
        await server.stop()
    }

    @Test func updatesYieldTheStateThenEventsAndSayWhenTheConsumerFellBehind() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url)
        var updates = store.updates(of: .only(["a"]), bufferLimit: 4).makeAsyncIterator()
        var first = await updates.next()
        while case .connection = first { first = await updates.next() }
        guard case .loaded(let carts) = first else {
            Issue.record("first \(String(describing: first))")
            return
        }
        #expect(carts.map(\.version) == [1])

        // Ten events while nobody reads: more than the buffer holds.
        for index in 0..<10 { await server.add("a", "s\(index)") }
        await eventually("the replica has them") { store.cart("a")?.version == 11 }
        var received: [RemoteCartUpdate] = []
        while received.count < 2, let next = await updates.next() {
            if case .connection = next { continue }
            received.append(next)
        }
        guard case .resynced(let resynced, .fellBehind) = received.first, case .applied(let event, let cart) = received.last else {
            Issue.record("received \(received)")
            return
        }
        #expect(event.version == (resynced.first?.version ?? 0) + 1, "the events after the summary follow it with no gap")
        #expect(cart.version == 11)
    }

    /// The `updates` sequence carries what an observer is told of writes and of the cache: a
    /// write shown pending then confirmed, a refused one rolled back with the server's error,
    /// and on a cold start the cached carts first.
    @Test func updatesCarryPendingWritesRejectionsAndTheCachesLoad() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let (file, removeFile) = try CacheFileTests.cacheFile()
        defer { removeFile() }
        let store = RemoteCartStore(server: server.url, cacheFile: file)
        var updates = store.updates(of: .only(["a"])).makeAsyncIterator()
        func next(where wanted: (RemoteCartUpdate) -> Bool) async -> RemoteCartUpdate? {
            while let update = await updates.next() {
                if wanted(update) { return update }
            }
            return nil
        }
        _ = await next { if case .loaded = $0 { true } else { false } }
        let write = try await store.addItem("pear", quantity: 1, unitPriceCents: 5, to: "a")
        guard case .pending(let pending, let showing) = await next(where: { if case .pending = $0 { true } else { false } }) else {
            Issue.record("no pending update")
            return
        }
        #expect(pending.map(\.id) == [write.id] && showing.items.map(\.sku) == ["seed", "pear"], "shown at once")
        let refused = try await store.removeItem("durian", from: "a")
        guard case .rejected(let rolledBack, let error) = await next(where: { if case .rejected = $0 { true } else { false } }) else {
            Issue.record("no rejection")
            return
        }
        #expect(rolledBack == refused && error.code == .itemNotFound)
        await store.close()

        let again = RemoteCartStore(server: server.url, cacheFile: file)
        var restarted = again.updates(of: .only(["a"])).makeAsyncIterator()
        var first = await restarted.next()
        while case .connection = first { first = await restarted.next() }
        guard case .loadedFromCache(let cached) = first else {
            Issue.record("first on a cold start: \(String(describing: first))")
            return
        }
        #expect(cached.first?.items.map(\.sku) == ["seed", "pear"], "the cache's carts, before any network")
        await again.close()
        await server.stop()
    }
}

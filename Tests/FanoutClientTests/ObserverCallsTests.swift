import Clocks
import Dispatch
import FanoutClient
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing
import WeakObservers

/// Observers without a queue are called after the store's lock is released, in the order the
/// store decided the calls, one at a time: a slow one holds neither the store nor the others.
@Suite("Calls to observers", .timeLimit(.minutes(1)))
struct ObserverCallsTests {
    /// The event of `seq`: cart `alice`, version `seq`.
    static func event(_ seq: Int64) -> CartEvent {
        let item = CartItem(sku: "apple-\(seq)", quantity: 1, unitPriceCents: 100)
        return CartEvent(seq: seq, cartID: "alice", change: .itemAdded(item: item, addedQuantity: 1), version: seq, committedAt: Date())
    }

    /// A store that never connects (nothing listens at its address, and its clock never
    /// advances past the pause after the first failure), loaded by hand with an empty snapshot
    /// at seq 0, as its subscription would load it. Its own task then makes no call: the
    /// thread that takes an update makes the calls it decides.
    static func loadedStore(observing observer: any CartObserver) async throws -> RemoteCartStore {
        let store = RemoteCartStore(server: URL(string: "http://127.0.0.1:9")!, clock: TestClock())
        store.observers.add(observer, carts: .all)
        await eventually("the first attempt failed: the store pauses") {
            if case .reconnecting = store.connectionState { true } else { false }
        }
        _ = try await store.replica.plan(for: store.observers, api: store.server)
        try store.replica.take(.snapshot(CartSnapshot(carts: [], seq: 0), reason: .initial), observers: store.observers)
        return store
    }

    @Test func anObserverStuckInItsCallbackHoldsNeitherTheStoreNorTheOtherObservers() async throws {
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        // Without a queue, it stops in its first event's callback until released.
        let stuck = Recorder { _, _, count in
            if count == 1 {
                entered.signal()
                release.wait()
            }
        }
        let store = try await Self.loadedStore(observing: stuck)
        // The store's receiving task, in an app: here a thread of its own, as it will block.
        let receiving = Task {
            try await onThreadOfItsOwn { try store.replica.take(.event(Self.event(1), raw: ""), observers: store.observers) }
        }
        try await onThreadOfItsOwn { entered.wait() }

        // Meanwhile, the store reads, takes the next event and greets a newcomer at once.
        #expect(store.cart("alice")?.version == 1, "reads do not wait for the observer")
        try store.replica.take(.event(Self.event(2), raw: ""), observers: store.observers)
        #expect(store.cart("alice")?.version == 2 && store.seq == 2)
        let newcomer = Recorder(queue: DispatchQueue(label: "newcomer"))
        store.observers.add(newcomer, carts: .all, queue: newcomer.queue)
        await eventually("the newcomer is greeted") { newcomer.isLoaded }
        #expect(newcomer.loadedVersions == ["alice": 2], "it is greeted with the carts as they are now")
        #expect(stuck.events.map(\.seq) == [1], "the stuck observer is told event 2 only after event 1's call returns")

        release.signal()
        try await receiving.value
        await eventually("the stuck observer gets event 2") { stuck.events.count == 2 }
        #expect(stuck.events.map(\.seq) == [1, 2], "in seq order, once each")
        #expect(newcomer.events.isEmpty, "the newcomer was loaded after event 2: it is not told it again")
        withExtendedLifetime(newcomer) {}
        await store.close()
    }

    @Test func anObserverMayReadTheStoreAndAddObserversFromItsCallback() async throws {
        let seen = NIOLockedValueBox<[Int64?]>([])
        let added = Recorder()
        let reader = Recorder { _, store, count in
            let remote = store as! RemoteCartStore
            seen.withLockedValue { $0.append(remote.cart("alice")?.version) }
            // Its carts as the store holds them; a newcomer added from inside the callback.
            if count == 1 { remote.observers.add(added, carts: .only(["alice"]), queue: nil) }
        }
        let store = try await Self.loadedStore(observing: reader)
        try store.replica.take(.event(Self.event(1), raw: ""), observers: store.observers)
        #expect(seen.withLockedValue { $0 } == [1], "called before take returned, and the store read from inside the callback")
        #expect(added.loadedVersions == ["alice": 1], "the observer added in the callback is greeted once that callback returns")
        try store.replica.take(.event(Self.event(2), raw: ""), observers: store.observers)
        #expect(added.events.map(\.seq) == [2])
        #expect(reader.events.map(\.seq) == [1, 2])
        await store.close()
    }

    @Test func aClosedStoreTakesNoWriteAndSaysWhy() async throws {
        let store = try await Self.loadedStore(observing: Recorder())
        await store.close()
        do {
            try await store.addItem("apple", quantity: 1, unitPriceCents: 50, to: "alice")
            Issue.record("a closed store took a write")
        } catch RemoteStoreError.storeClosed {
            #expect(store.pendingWrites.isEmpty)
        }
    }

    @Test func callsAreMadeInOrderOneAtATimeAndAProducerWaitsForRoomPastTheLimit() async throws {
        let calls = DeferredCalls(limit: 4)
        let made = NIOLockedValueBox<[Int]>([])
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        calls.append {
            entered.signal()
            release.wait()
            made.withLockedValue { $0.append(0) }
        }
        let first = Task { try await onThreadOfItsOwn { calls.run() } }
        try await onThreadOfItsOwn { entered.wait() }
        for index in 1...4 { calls.append { made.withLockedValue { $0.append(index) } } }
        // Another thread runs while the first is making a call: it leaves them to it.
        calls.run()
        #expect(made.withLockedValue { $0 }.isEmpty && calls.backlog == 4)

        let waited = NIOLockedValueBox(false)
        let producer = Task {
            await calls.room()
            waited.withLockedValue { $0 = true }
        }
        // The producer is not let on while four calls wait: it waits for room.
        await eventually("the producer waits for room") { calls.producersWaiting == 1 }
        #expect(!waited.withLockedValue { $0 })
        release.signal()
        try await first.value
        await producer.value
        #expect(made.withLockedValue { $0 } == [0, 1, 2, 3, 4], "in the order appended, none dropped")
        #expect(calls.backlog == 0)
        await calls.room()
    }
}

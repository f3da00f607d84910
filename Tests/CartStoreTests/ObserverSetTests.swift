import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization
import Testing

@testable import CartStore

@Suite("Weak observer set")
struct ObserverSetTests {
    static let event = CartEvent(seq: 1, cartID: "c", change: .cartCleared, version: 1, committedAt: Date())

    /// Stand-in store argument for direct `notify` calls.
    static let store = try! CartStore.inMemory()

    static func post(_ set: ObserverSet, _ event: CartEvent = event) {
        set.notify { $0.cartStore(store, didCommit: event) }
    }

    @Test func removeWaitsForACallbackUnderWayOnAnotherThread() async {
        /// Blocks in its callback until released.
        final class SlowObserver: CartStoreObserver, @unchecked Sendable {  // fields: semaphores and an atomic
            let entered = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let finished = Atomic<Bool>(false)
            func cartStore(_ store: CartStore, didCommit event: CartEvent) {
                entered.signal()
                release.wait()
                finished.store(true, ordering: .releasing)
            }
        }
        let set = ObserverSet()
        let observer = SlowObserver()
        set.add(observer)
        DispatchQueue.global().async { Self.post(set) }
        await Task.detached { observer.entered.wait() }.value
        // Another thread removes it while the callback runs: remove must not return before it ends.
        let remover = Task.detached { () -> Bool in
            set.remove(observer)
            return observer.finished.load(ordering: .acquiring)
        }
        // `remove` marks the observer gone first, then waits: let the callback end only then.
        while set.contains(observer) { await Task.yield() }
        observer.release.signal()
        #expect(await remover.value, "remove returned while its observer's callback was still running")
    }

    @Test func aReleasedObserverDropsOutWithoutUnregistering() {
        let set = ObserverSet()
        var first: RecordingObserver? = RecordingObserver()
        let second = RecordingObserver()
        weak let weakFirst = first
        set.add(first!)
        set.add(second)
        #expect(set.count == 2)
        first = nil
        #expect(weakFirst == nil, "the set must not keep an observer alive")
        Self.post(set)
        #expect(set.count == 1)
        #expect(second.received.count == 1)
    }

    @Test func explicitRemoveAndDuplicateAdd() {
        let set = ObserverSet()
        let observer = RecordingObserver()
        set.add(observer)
        set.add(observer)
        Self.post(set)
        #expect(observer.received.count == 1, "added twice, notified once")
        set.remove(observer)
        #expect(!set.contains(observer))
        Self.post(set)
        #expect(observer.received.count == 1)
        set.remove(observer)  // removing again is harmless
        #expect(set.count == 0)
    }

    @Test func removeCancelsDeliveriesAlreadyQueued() async {
        let set = ObserverSet()
        let queue = DispatchQueue(label: "observer")
        let observer = RecordingObserver()
        set.add(observer, queue: queue)
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }  // hold the queue so the delivery waits behind it
        Self.post(set)
        set.remove(observer)
        gate.signal()
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
        #expect(observer.received.isEmpty)
    }

    @Test func queuedDeliveryArrivesInOrderOnTheObserversQueue() async {
        let set = ObserverSet()
        let queue = DispatchQueue(label: "observer")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        let onQueue = NIOLockedValueBox(true)
        let observer = RecordingObserver { _ in
            if DispatchQueue.getSpecific(key: key) != true { onQueue.withLockedValue { $0 = false } }
        }
        set.add(observer, queue: queue)
        for seq in 1...100 {
            Self.post(set, CartEvent(seq: Int64(seq), cartID: "c", change: .cartCleared, version: Int64(seq), committedAt: Date()))
        }
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
        #expect(observer.seqs == Array(1...100))
        #expect(onQueue.withLockedValue { $0 })
    }

    @Test func addingAndRemovingInsideACallbackIsSafe() {
        let set = ObserverSet()
        let late = RecordingObserver()
        let victim = RecordingObserver()
        final class SelfRemover: CartStoreObserver {
            let set: ObserverSet
            let late: RecordingObserver
            let calls = NIOLockedValueBox(0)
            init(set: ObserverSet, late: RecordingObserver) {
                self.set = set
                self.late = late
            }
            func cartStore(_ store: CartStore, didCommit event: CartEvent) {
                calls.withLockedValue { $0 += 1 }
                set.remove(self)
                set.add(late)
            }
        }
        let remover = SelfRemover(set: set, late: late)
        set.add(remover)
        set.add(victim)
        Self.post(set)
        Self.post(set)
        #expect(remover.calls.withLockedValue { $0 } == 1)
        // Changes made during a notification apply from the next one.
        #expect(late.received.count == 1)
        #expect(victim.received.count == 2)
        #expect(set.count == 2)
    }

    @Test func anObserverReleasedByAnotherCallbackIsNotCalled() {
        let set = ObserverSet()
        final class Holder: @unchecked Sendable {  // test-only: mutated on one thread
            var held: RecordingObserver? = RecordingObserver()
        }
        let holder = Holder()
        let releaser = RecordingObserver { _ in holder.held = nil }
        set.add(releaser)
        set.add(holder.held!)
        Self.post(set)
        #expect(holder.held == nil)
        #expect(set.count == 1)
    }

    @Test func thousandsOfObserversComeAndGo() {
        let set = ObserverSet()
        var observers = (0..<5_000).map { _ in RecordingObserver() }
        for observer in observers { set.add(observer) }
        #expect(set.count == 5_000)
        for observer in observers[0..<1_000] { set.remove(observer) }
        observers.removeFirst(2_000)  // 1 000 removed explicitly, 1 000 released
        Self.post(set)
        #expect(set.count == 3_000)
        #expect(observers.allSatisfy { $0.received.count == 1 })
    }

    @Test func concurrentAddRemoveReleaseAndNotifyFromManyThreads() async {
        let set = ObserverSet()
        let permanent = RecordingObserver()
        set.add(permanent)
        let posts = 2_000
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for seq in 1...posts {
                    Self.post(set, CartEvent(seq: Int64(seq), cartID: "c", change: .cartCleared, version: 1, committedAt: Date()))
                }
            }
            for _ in 0..<4 {
                group.addTask {
                    for round in 0..<500 {
                        let observer = RecordingObserver()
                        set.add(observer)
                        if round.isMultiple(of: 2) { set.remove(observer) }
                        _ = set.contains(permanent)
                    }
                }
            }
        }
        #expect(permanent.seqs == Array(1...Int64(posts)))
        #expect(set.count == 1)
    }
}

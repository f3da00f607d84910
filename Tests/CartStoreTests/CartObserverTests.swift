import Dispatch
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CartStore

/// A `CartObserver` of an in-process store: its carts' state when added, then exactly the
/// later changes of its carts, once, in seq order — as a `RemoteCartStore`'s observers get.
@Suite("Cart observers of a local store")
struct CartObserverTests {
    @Test(arguments: Engine.available)
    func anObserverGetsItsCartsStateThenEachChangeOfThem(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 50)
        try await store.addItem(cartID: "bob", sku: "pear", quantity: 1, unitPriceCents: 80)
        let alice = CartRecorder()
        let never = CartRecorder()
        store.observers.add(alice, carts: .only(["alice"]), queue: alice.queue)
        store.observers.add(never, carts: .only(["nobody"]), queue: never.queue)
        #expect(await eventually("alice's state") { alice.loaded != nil })
        #expect(alice.loaded?.map(\.id) == ["alice"])
        #expect(alice.loaded?.first?.version == 1)
        #expect(await eventually("a cart never changed, empty") { never.loaded != nil })
        #expect(never.loaded == [Cart(id: "nobody")])

        try await store.addItem(cartID: "bob", sku: "plum", quantity: 1, unitPriceCents: 10)
        let commit = try await store.addItem(cartID: "alice", sku: "pear", quantity: 2, unitPriceCents: 80)
        #expect(await eventually("alice's change") { alice.applied.count == 1 })
        #expect(alice.applied.first?.event == commit.event)
        #expect(alice.applied.first?.cart == commit.cart, "the cart after the change, as committed")
        #expect(alice.order == ["load", "apply"])
        #expect(never.applied.isEmpty, "another cart's change is not its")
        #expect(store.connectionState == .live)
    }

    @Test func everyObserverAddedUnderConcurrentWritesGetsEachLaterEventOnce() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        let recorders = NIOLockedValueBox<[(CartRecorder, CartSelection)]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await writeConcurrently(to: store, writers: 6, perWriter: 60) }
            group.addTask {
                // Observers join while the writers write: synchronous, queued, every cart, some.
                for index in 0..<24 {
                    let recorder = CartRecorder(queued: index % 2 == 0)
                    let selection: CartSelection = index % 3 == 0 ? .all : .only(["w\(index % 6)", "w\((index + 1) % 6)"])
                    recorders.withLockedValue { $0.append((recorder, selection)) }
                    store.observers.add(recorder, carts: selection, queue: recorder.queue)
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            try await group.waitForAll()
        }
        let log = try await wholeLog(store)
        let final = try await store.snapshot()
        for (recorder, selection) in recorders.withLockedValue({ $0 }) {
            let expected = final.carts.filter { selection.contains($0.id) }
            #expect(
                await eventually("an observer to reach the last commit") { recorder.carts() == expected },
                "state and events fold to the store's carts")
            recorder.expectExactlyTheLogAfterItsState(log, selection: selection)
        }
    }

    @Test func commitsPastTheBoundWhileTheStateIsReadAreReadAgainNotLost() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        store.observers.followerBufferLimit.withLockedValue { $0 = 1 }
        let recorders = NIOLockedValueBox<[CartRecorder]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await writeConcurrently(to: store, writers: 4, perWriter: 40) }
            group.addTask {
                for index in 0..<8 {
                    let recorder = CartRecorder(queued: index % 2 == 0)
                    recorders.withLockedValue { $0.append(recorder) }
                    store.observers.add(recorder, carts: .all, queue: recorder.queue)
                    try await Task.sleep(for: .milliseconds(3))
                }
            }
            try await group.waitForAll()
        }
        let log = try await wholeLog(store)
        let final = try await store.snapshot()
        for recorder in recorders.withLockedValue({ $0 }) {
            #expect(await eventually("an observer to reach the last commit") { recorder.carts() == final.carts })
            recorder.expectExactlyTheLogAfterItsState(log, selection: .all, resyncs: true)
        }
    }

    @Test func aStateOlderThanCommitsDroppedPastTheBoundIsReadAgain() async throws {
        let store = try CartStore.inMemory()
        store.observers.followerBufferLimit.withLockedValue { $0 = 2 }
        try await store.addItem(cartID: "a", sku: "s", quantity: 1, unitPriceCents: 1)
        let gate = Gate()
        store.observers.afterStateRead.withLockedValue { $0 = { await gate.pass() } }
        let recorder = CartRecorder()
        store.observers.add(recorder, carts: .all, queue: recorder.queue)
        #expect(await eventually("the state read") { store.observers.statesRead.withLockedValue { $0 } == 1 })
        // Five commits while that state waits: two are kept, then all are dropped.
        for index in 0..<5 {
            try await store.addItem(cartID: "a", sku: "t\(index)", quantity: 1, unitPriceCents: 1)
        }
        gate.open()
        #expect(await eventually("the state") { recorder.loaded != nil })
        #expect(store.observers.statesRead.withLockedValue { $0 } == 2, "read again: the first was older than what was dropped")
        #expect(recorder.loaded?.map(\.version) == [6], "the state after every commit, told once")
        let next = try await store.addItem(cartID: "a", sku: "u", quantity: 1, unitPriceCents: 1)
        #expect(await eventually("the next change") { recorder.applied.count == 1 })
        #expect(recorder.applied.map(\.event) == [next.event])
        #expect(recorder.order == ["load", "apply"])
    }

    @Test(arguments: Engine.available)
    func aReleasedObserverDropsOutAndARemovedOneHearsNothingMore(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        var released: CartRecorder? = CartRecorder()
        weak let weakReleased = released
        let removed = CartRecorder()
        store.observers.add(released!, carts: .all, queue: nil)
        store.observers.add(removed, carts: .all, queue: removed.queue)
        #expect(await eventually("both loaded") { released?.loaded != nil && removed.loaded != nil })
        #expect(store.observers.contains(removed))
        released = nil
        // `loaded` is set inside the callback: the delivery holds the observer until it returns.
        #expect(await eventually("the released observer freed") { weakReleased == nil })
        store.observers.remove(removed)
        #expect(!store.observers.contains(removed))
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        #expect(store.observers.count == 0)
        removed.queue?.sync {}
        #expect(removed.applied.isEmpty, "no callback after remove returned")
    }

    @Test func closingTheStoreTellsEveryObserverClosedLast() async throws {
        let store = try CartStore.inMemory()
        let recorder = CartRecorder()
        store.observers.add(recorder, carts: .all, queue: recorder.queue)
        #expect(await eventually("loaded") { recorder.loaded != nil })
        try store.close()
        #expect(store.connectionState == .closed)
        #expect(await eventually("told closed") { recorder.states == [.closed] })
        let late = CartRecorder()
        store.observers.add(late, carts: .all, queue: late.queue)
        #expect(!store.observers.contains(late), "an observer added after close is not taken: no callback")
    }
}

/// Holds whoever passes until it is opened.
final class Gate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = NIOLockedValueBox(State())

    func pass() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let goOn = state.withLockedValue { state in
                if !state.isOpen { state.waiters.append(continuation) }
                return state.isOpen
            }
            if goOn { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLockedValue { state in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// A `CartObserver` that records what it is told, on a queue of its own or on the store's
/// threads.
final class CartRecorder: CartObserver {
    struct Applied: Sendable {
        let event: CartEvent
        let cart: Cart
    }
    private struct Record {
        var loaded: [Cart]?
        /// The last state told (`didLoad`, or `didResync`), and the changes since.
        var base: [Cart]?
        var sinceBase: [Applied] = []
        var applied: [Applied] = []
        var order: [String] = []
        var states: [CartConnectionState] = []
    }
    let queue: DispatchQueue?
    private let record = NIOLockedValueBox(Record())

    init(queued: Bool = true) {
        queue = queued ? DispatchQueue(label: "cart-recorder") : nil
    }

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        record.withLockedValue {
            $0.loaded = carts
            $0.base = carts
            $0.order.append("load")
        }
    }
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
        record.withLockedValue {
            $0.applied.append(Applied(event: event, cart: cart))
            $0.sinceBase.append(Applied(event: event, cart: cart))
            $0.order.append("apply")
        }
    }
    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        record.withLockedValue {
            $0.base = carts
            $0.sinceBase = []
            $0.order.append("resync")
        }
    }
    func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {
        record.withLockedValue { $0.states.append(state) }
    }

    var loaded: [Cart]? { record.withLockedValue(\.loaded) }
    var applied: [Applied] { record.withLockedValue(\.applied) }
    var order: [String] { record.withLockedValue(\.order) }
    var states: [CartConnectionState] { record.withLockedValue(\.states) }

    /// Its carts now: the last state it was told, each change since applied; empty carts left
    /// out.
    func carts() -> [Cart] {
        record.withLockedValue { record in
            var carts = Dictionary(uniqueKeysWithValues: (record.base ?? []).map { ($0.id, $0) })
            for applied in record.sinceBase { carts[applied.cart.id] = applied.cart }
            return carts.values.filter { $0.version > 0 }.sorted { $0.id < $1.id }
        }
    }

    /// What it was told is its carts' state at some seq S, then exactly the log's events of its
    /// carts after S: each once, in seq order, none missing, each with its cart after it. With
    /// `resyncs`, a later state (`fellBehind`) may replace it, and the same holds after it.
    func expectExactlyTheLogAfterItsState(
        _ log: [CartEvent], selection: CartSelection, resyncs: Bool = false, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let (base, sinceBase, applied, order) = record.withLockedValue { ($0.base ?? [], $0.sinceBase, $0.applied, $0.order) }
        #expect(order.first == "load", sourceLocation: sourceLocation)
        if !resyncs { #expect(!order.contains("resync"), sourceLocation: sourceLocation) }
        let seqs = applied.map(\.event.seq)
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count, "in seq order, none twice", sourceLocation: sourceLocation)
        let events = sinceBase.map(\.event)
        let mine = log.filter { selection.contains($0.cartID) }
        #expect(Array(mine.suffix(events.count)) == events, "a run of the log's end, in order", sourceLocation: sourceLocation)
        // The state was at S: every cart at the version of its last event at or before S.
        let s = events.first.map { $0.seq - 1 } ?? log.last?.seq ?? 0
        let atS = fold(log.filter { $0.seq <= s && selection.contains($0.cartID) })
        #expect(base.filter { $0.version > 0 } == atS, "the state it was told is the log up to S", sourceLocation: sourceLocation)
        var carts = Dictionary(uniqueKeysWithValues: base.map { ($0.id, $0) })
        for entry in sinceBase {
            carts[entry.event.cartID, default: Cart(id: entry.event.cartID)].apply(entry.event)
            #expect(carts[entry.event.cartID] == entry.cart, "the cart after the event", sourceLocation: sourceLocation)
        }
    }
}

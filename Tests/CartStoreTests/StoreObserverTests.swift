import Dispatch
import FanoutTestSupport
import Foundation
import GRDB
import NIOConcurrencyHelpers
import Testing

@testable import CartStore

@Suite("Store observers")
struct StoreObserverTests {
    @Test(arguments: Engine.available)
    func everyLiveObserverGetsEveryCommittedEventOnceInSeqOrder(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let observers = (0..<3).map { _ in RecordingObserver() }
        for observer in observers { store.observers.add(observer) }
        try await EventLogTests.churn(store, steps: 200)
        let log = try await wholeLog(store)
        for observer in observers {
            #expect(observer.received == log)
        }
    }

    @Test func concurrentWritersDeliverInSeqOrder() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        let sync = RecordingObserver()
        let queued = RecordingObserver()
        store.observers.add(sync)
        store.observers.add(queued, queue: DispatchQueue(label: "queued"))
        try await writeConcurrently(to: store, writers: 8, perWriter: 50)
        #expect(sync.seqs == Array(1...400))
        await eventually("queued observer to catch up") { queued.received.count == 400 }
        #expect(queued.seqs == Array(1...400))
    }

    @Test(arguments: Engine.available)
    func synchronousObserversHaveTheEventWhenTheMutationReturns(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let observer = RecordingObserver()
        store.observers.add(observer)
        let commit = try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        #expect(observer.received.last == commit.event)
    }

    @Test func observersSeeOnlyCommittedState() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: .normal)
        // Reading the file from another connection at delivery time shows the event committed.
        let reader = try DatabasePoolReader(path: directory.path("store.sqlite"))
        let visible = NIOLockedValueBox<[Bool]>([])
        let observer = RecordingObserver { event in
            let count = reader.count(seq: event.seq)
            visible.withLockedValue { $0.append(count == 1) }
        }
        store.observers.add(observer)
        for index in 0..<5 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        #expect(visible.withLockedValue { $0 } == Array(repeating: true, count: 5))
    }

    struct Vetoed: Error, Equatable { let reason: String }

    final class Validator: CartStoreObserver {
        let events = NIOLockedValueBox<[CartEvent]>([])
        let proposals = NIOLockedValueBox<[CartChangeProposal]>([])
        func cartStore(_ store: CartStore, didCommit event: CartEvent) { events.withLockedValue { $0.append(event) } }
        func cartStore(_ store: CartStore, validate proposal: CartChangeProposal) throws {
            proposals.withLockedValue { $0.append(proposal) }
            if proposal.after.totalCents > 1_000 {
                throw Vetoed(reason: "cart \(proposal.cartID) would cost more than 10.00")
            }
        }
    }

    @Test(arguments: Engine.available)
    func aValidatorVetoRollsBackAndNoObserverSeesAnEvent(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let validator = Validator()
        let bystander = RecordingObserver()
        store.observers.add(bystander)
        store.observers.add(validator, queue: DispatchQueue(label: "validator"))  // validates synchronously anyway
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 600)
        do {
            try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 600)
            Issue.record("the validator should have vetoed")
        } catch let error as Vetoed {
            #expect(error.reason.contains("more than 10.00"))
        }
        #expect(try await store.cart("c")?.items.map(\.sku) == ["a"])
        #expect(try await store.latestSeq() == 1)
        #expect(bystander.seqs == [1])
        let proposals = validator.proposals.withLockedValue { $0 }
        #expect(proposals.count == 2)
        #expect(proposals.last?.before.items.count == 1)
        #expect(proposals.last?.after.items.count == 2)
        // After a veto the next change gets the next seq: nothing was consumed.
        let next = try await store.addItem(cartID: "c", sku: "c", quantity: 1, unitPriceCents: 100)
        #expect(next.event.seq == 2)
    }

    @Test(arguments: Engine.available)
    func anObserverReleasedByItsOwnerStopsReceiving(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        var observer: RecordingObserver? = RecordingObserver()
        weak let weakObserver = observer
        store.observers.add(observer!)
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        #expect(observer?.received.count == 1)
        observer = nil
        #expect(weakObserver == nil)
        try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1)
        #expect(store.observers.count == 0)
    }

    @Test(arguments: Engine.available)
    func aQueuedObserverMayWriteToTheStoreInReaction(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        final class Auditor: CartStoreObserver {
            func cartStore(_ store: CartStore, didCommit event: CartEvent) {
                guard event.cartID == "c" else { return }
                // The write runs after this callback returns, outside the store's write.
                Task {
                    try await store.addItem(cartID: "audit", sku: "e\(event.seq)", quantity: 1, unitPriceCents: 0)
                }
            }
        }
        let auditor = Auditor()
        store.observers.add(auditor, queue: DispatchQueue(label: "auditor"))
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        await eventually("audit cart") { (try? await store.cart("audit"))??.items.count == 1 }
    }
}

/// A second, independent connection to a store's file, for checking what is committed.
struct DatabasePoolReader: Sendable {
    let queue: GRDB.DatabaseQueue
    init(path: String) throws {
        var configuration = GRDB.Configuration()
        configuration.readonly = true
        queue = try GRDB.DatabaseQueue(path: path, configuration: configuration)
    }
    func count(seq: Int64) -> Int {
        (try? queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM cart_events WHERE seq = ?", arguments: [seq]) ?? 0 }) ?? -1
    }
}

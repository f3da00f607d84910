import Dispatch
import FanoutTestSupport
import Foundation
import GRDB
import Synchronization
import Testing

@testable import CartStore

@Suite("Group commit")
struct GroupCommitTests {
    /// Holds the writer connection busy until `release()`, so that mutations pile up behind it.
    final class WriterGate: Sendable {
        private let gate = DispatchSemaphore(value: 0)

        init(_ store: CartStore) {
            store.sqlite.writer.asyncWriteWithoutTransaction { [gate] _ in gate.wait() }
        }

        func release() { gate.signal() }
    }

    struct Vetoed: Error {}

    /// Counts the transactions committed on the store's writer connection (GRDB tells every
    /// transaction observer of each COMMIT).
    final class CommitCounter: TransactionObserver, Sendable {
        let commits = Atomic<Int>(0)
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { true }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseDidCommit(_ db: Database) { commits.add(1, ordering: .relaxed) }
        func databaseDidRollback(_ db: Database) {}
    }

    final class Tally: Sendable {
        let count = Atomic<Int>(0)
    }

    final class Vetoer: CartStoreObserver {
        func cartStore(_ store: CartStore, didCommit event: CartEvent) {}
        func cartStore(_ store: CartStore, validate proposal: CartChangeProposal) throws {
            if case .itemAdded(let item, _) = proposal.change, item.sku.hasPrefix("veto") { throw Vetoed() }
        }
    }

    @Test func waitingChangesShareOneTransactionAndARefusedOneRollsBackAlone() async throws {
        let store = try CartStore.inMemory()
        let vetoer = Vetoer()
        let bystander = RecordingObserver()
        store.observers.add(vetoer)
        store.observers.add(bystander)
        let counter = CommitCounter()
        store.sqlite.writer.add(transactionObserver: counter, extent: .observerLifetime)
        let gate = WriterGate(store)
        // 60 changes queue while the writer is busy: a third vetoed, a third refused by the
        // store (no such line), a third good.
        let outcomes = Task {
            await withTaskGroup(of: (Int, Result<CartCommit, any Error>).self) { group in
                for index in 0..<60 {
                    group.addTask {
                        do {
                            let commit =
                                switch index % 3 {
                                case 0: try await store.addItem(cartID: "c", sku: "veto\(index)", quantity: 1, unitPriceCents: 1)
                                case 1: try await store.setQuantity(cartID: "c", sku: "missing\(index)", quantity: 2)
                                default: try await store.addItem(cartID: "c", sku: "ok\(index)", quantity: 1, unitPriceCents: 1)
                                }
                            return (index, .success(commit))
                        } catch {
                            return (index, .failure(error))
                        }
                    }
                }
                var all: [Int: Result<CartCommit, any Error>] = [:]
                for await (index, outcome) in group { all[index] = outcome }
                return all
            }
        }
        await eventually("60 changes waiting") { store.waitingChanges == 60 }
        gate.release()
        let results = await outcomes.value

        #expect(counter.commits.load(ordering: .relaxed) == 1, "one transaction for the batch")
        var committed: [Int64: String] = [:]
        for (index, outcome) in results {
            switch (index % 3, outcome) {
            case (0, .failure(let error)):
                #expect(error is Vetoed)
            case (1, .failure(let error)):
                #expect((error as? CartStoreError)?.code == .cartNotFound || (error as? CartStoreError)?.code == .itemNotFound)
            case (2, .success(let commit)):
                committed[commit.event.seq] = commit.event.change.sku
            default:
                Issue.record("change \(index) ended as \(outcome)")
            }
        }
        // The 20 good ones got seqs 1…20 without gaps, and the log and the observer agree.
        #expect(committed.keys.sorted() == Array(1...20))
        guard case .events(let logged, _) = try await store.events(after: 0) else {
            Issue.record("log too old")
            return
        }
        #expect(logged.map(\.seq) == Array(1...20))
        #expect(logged.map { committed[$0.seq] } == logged.map(\.change.sku))
        #expect(bystander.seqs == Array(1...20))
        #expect(try await store.cart("c")?.items.count == 20)
    }

    @Test func pastTheLimitAChangeIsRefusedAsOverloadedAndWritesNothing() async throws {
        let store = try CartStore(writer: DatabaseQueue(), commitLimit: 5)
        let gate = WriterGate(store)
        let refused = Tally()
        let writes = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        do {
                            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
                        } catch let error as CartStoreError where error.code == .overloaded {
                            refused.count.add(1, ordering: .relaxed)
                        } catch {
                            Issue.record("unexpected \(error)")
                        }
                    }
                }
            }
        }
        await eventually("5 waiting, 3 refused") {
            store.waitingChanges == 5 && refused.count.load(ordering: .relaxed) == 3
        }
        gate.release()
        await writes.value
        #expect(try await store.latestSeq() == 5)
        #expect(try await store.cart("c")?.items.count == 5)
    }
}

extension CartChange {
    fileprivate var sku: String? {
        switch self {
        case .itemAdded(let item, _): item.sku
        case .quantityChanged(let sku, _), .itemRemoved(let sku): sku
        case .cartCleared: nil
        }
    }
}

@Suite("Group commit transaction")
struct GroupCommitTransactionTests {
    /// A body that writes a cart row and reports a commit for it.
    static func writesCart(_ id: String) -> @Sendable (Database) throws -> CartCommit {
        { db in
            try db.execute(sql: "INSERT INTO carts (id, version) VALUES (?, 1)", arguments: [id])
            let event = CartEvent(seq: 0, cartID: id, change: .cartCleared, version: 1, committedAt: Date())
            return CartCommit(cart: Cart(id: id, version: 1), event: event)
        }
    }

    @Test func whenAnErrorEndsTheWholeTransactionTheBatchFailsAsOne() async throws {
        let store = try CartStore.inMemory()
        let bodies: [@Sendable (Database) throws -> CartCommit] = [
            Self.writesCart("kept-if-the-batch-commits"),
            // As SQLite does on some errors (disk full, I/O): the whole transaction is gone.
            { db in
                try db.execute(sql: "ROLLBACK")
                throw CartStoreError(.cartNotFound, "stands for an I/O error")
            },
            Self.writesCart("after-the-failure"),
        ]
        await #expect(throws: CartStoreError.self) {
            try await store.sqlite.writer.writeWithoutTransaction { db in _ = try store.sqlite.commits.commit(bodies, db) }
        }
        let carts = try await store.sqlite.writer.read { db in try String.fetchAll(db, sql: "SELECT id FROM carts") }
        #expect(carts.isEmpty, "nothing of the batch may be written")
    }

    @Test func aFailedBodyRollsBackAloneAndTheOthersCommit() async throws {
        let store = try CartStore.inMemory()
        let bodies: [@Sendable (Database) throws -> CartCommit] = [
            Self.writesCart("a"),
            { db in
                try db.execute(sql: "INSERT INTO carts (id, version) VALUES ('b', 1)")
                throw CartStoreError(.versionConflict, "refused after writing")
            },
            Self.writesCart("c"),
        ]
        let outcomes = try await store.sqlite.writer.writeWithoutTransaction { db in try store.sqlite.commits.commit(bodies, db) }
        #expect(outcomes.map { (try? $0.get())?.cart.id } == ["a", nil, "c"])
        let carts = try await store.sqlite.writer.read { db in try String.fetchAll(db, sql: "SELECT id FROM carts ORDER BY id") }
        #expect(carts == ["a", "c"])
    }
}

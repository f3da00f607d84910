import CartStorePostgres
import FanoutTestSupport
import Foundation
import Testing

@testable import CartStore

/// Exactly-once writes: a mutation made with an `IdempotencyKey` is made once, and a repeat is
/// answered the first commit, on both engines, across a reopened store and (PostgreSQL) on
/// another store of the same database.
@Suite("Idempotency keys", .serialized, .timeLimit(.minutes(2)))
struct IdempotencyTests {
    @Test(arguments: Engine.available)
    func aRepeatedKeyIsAnsweredTheFirstCommitAndWritesNothing(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let observer = RecordingObserver()
        store.observers.add(observer)
        let key = try IdempotencyKey("order-1")
        let first = try await store.addItem(
            cartID: "c", sku: "apple", quantity: 2, unitPriceCents: 150, name: "Apple", idempotencyKey: key)
        let again = try await store.addItem(
            cartID: "c", sku: "apple", quantity: 2, unitPriceCents: 150, name: "Apple", idempotencyKey: key)
        #expect(!first.isReplay)
        #expect(again.isReplay)
        #expect(again.event == first.event, "the same seq, change, version and time")
        #expect(again.cart == first.cart)
        #expect(first.event.idempotencyKey == "order-1")
        #expect(try await store.cart("c")?.items.map(\.quantity) == [2], "added once, not twice")
        // Once the cart has moved on, a repeat still answers the cart as that change left it.
        try await store.addItem(cartID: "c", sku: "pear", quantity: 1, unitPriceCents: 90)
        let later = try await store.addItem(
            cartID: "c", sku: "apple", quantity: 2, unitPriceCents: 150, name: "Apple", idempotencyKey: key)
        #expect(later.isReplay && later.cart == first.cart && later.event.seq == 1)
        let log = try await wholeLog(store)
        #expect(log.map(\.seq) == [1, 2])
        #expect(log.map(\.idempotencyKey) == ["order-1", nil], "the log keeps the key with its event")
        #expect(observer.seqs == [1, 2], "a replay delivers nothing")
        // Every mutation takes a key.
        let set = try await store.setQuantity(cartID: "c", sku: "pear", quantity: 4, idempotencyKey: try IdempotencyKey("q"))
        #expect(try await store.setQuantity(cartID: "c", sku: "pear", quantity: 4, idempotencyKey: try IdempotencyKey("q")) == set.replayed)
        let removed = try await store.removeItem(cartID: "c", sku: "pear", idempotencyKey: try IdempotencyKey("r"))
        #expect(try await store.removeItem(cartID: "c", sku: "pear", idempotencyKey: try IdempotencyKey("r")) == removed.replayed)
        let cleared = try await store.clearCart(cartID: "c", idempotencyKey: try IdempotencyKey("x"))
        #expect(try await store.clearCart(cartID: "c", idempotencyKey: try IdempotencyKey("x")) == cleared.replayed)
        #expect(try await wholeLog(store).count == 5)
    }

    @Test(arguments: Engine.available)
    func aKeyUsedForAnotherRequestIsRefusedAndWritesNothing(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let key = try IdempotencyKey("k")
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, idempotencyKey: key)
        let others: [@Sendable () async throws -> CartCommit] = [
            { try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 10, idempotencyKey: key) },
            { try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, name: "A", idempotencyKey: key) },
            { try await store.addItem(cartID: "d", sku: "a", quantity: 1, unitPriceCents: 10, idempotencyKey: key) },
            { try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, expectedVersion: 0, idempotencyKey: key) },
            { try await store.setQuantity(cartID: "c", sku: "a", quantity: 1, idempotencyKey: key) },
            { try await store.removeItem(cartID: "c", sku: "a", idempotencyKey: key) },
            { try await store.clearCart(cartID: "c", idempotencyKey: key) },
        ]
        for other in others {
            let error = await #expect(throws: CartStoreError.self) { try await other() }
            #expect(error?.code == .idempotencyKeyReused)
            #expect(error?.code.httpStatus == 422)
        }
        #expect(try await wholeLog(store).count == 1)
        // Another scope's key of the same name is another key.
        let someoneElses = try await store.addItem(
            cartID: "c", sku: "a", quantity: 2, unitPriceCents: 10, idempotencyKey: try IdempotencyKey("k", scope: "bob"))
        #expect(!someoneElses.isReplay && someoneElses.event.seq == 2)
    }

    /// A refusal is not remembered: it wrote nothing, and the key stays free.
    @Test(arguments: Engine.available)
    func aRefusedChangeLeavesItsKeyFree(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let key = try IdempotencyKey("k")
        let refused = await #expect(throws: CartStoreError.self) {
            try await store.setQuantity(cartID: "c", sku: "a", quantity: 3, idempotencyKey: key)
        }
        #expect(refused?.code == .cartNotFound)
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10)
        let made = try await store.setQuantity(cartID: "c", sku: "a", quantity: 3, idempotencyKey: key)
        #expect(!made.isReplay && made.cart.items.first?.quantity == 3)
    }

    @Test func aKeyOutsideTheRuleIsRefused() {
        for bad in ["", String(repeating: "k", count: 256), "with space", "tab\there", "é"] {
            let error = #expect(throws: CartStoreError.self) { try IdempotencyKey(bad) }
            #expect(error?.code == .invalidIdempotencyKey, "\(bad.prefix(10))")
        }
        #expect((try? IdempotencyKey(String(repeating: "k", count: 255)))?.key.count == 255)
        #expect((try? IdempotencyKey("8e03978e-40d5-43e8-bc93-6894a57f9324")) != nil)
    }

    @Test(arguments: Engine.available)
    func fiftyConcurrentRepeatsMakeOneEvent(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let key = try IdempotencyKey("once")
        let commits = try await withThrowingTaskGroup(of: CartCommit.self) { group in
            for _ in 0..<50 {
                group.addTask { try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, idempotencyKey: key) }
            }
            return try await group.reduce(into: [CartCommit]()) { $0.append($1) }
        }
        #expect(commits.count(where: { !$0.isReplay }) == 1)
        #expect(Set(commits.map(\.event)).count == 1, "every answer is the one commit's")
        #expect(Set(commits.map(\.cart)).count == 1)
        #expect(try await wholeLog(store).count == 1)
        #expect(try await store.cart("c")?.items.first?.quantity == 1)
    }

    @Test(arguments: Engine.available)
    func pruningForgetsOldKeysAndKeepsTheNewest(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        for index in 1...5 {
            try await store.addItem(
                cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1, idempotencyKey: try IdempotencyKey("k\(index)"))
        }
        #expect(try await store.pruneIdempotencyKeys(createdBefore: .distantPast, keepingNewest: 2) == 3)
        // A forgotten key is a new one: the change is made again (here, adding to the line).
        let again = try await store.addItem(
            cartID: "c", sku: "s1", quantity: 1, unitPriceCents: 1, idempotencyKey: try IdempotencyKey("k1"))
        #expect(!again.isReplay && again.event.seq == 6 && again.cart.items.first?.quantity == 2)
        let kept = try await store.addItem(cartID: "c", sku: "s5", quantity: 1, unitPriceCents: 1, idempotencyKey: try IdempotencyKey("k5"))
        #expect(kept.isReplay && kept.event.seq == 5)
        // Older than the time to live: all of them.
        #expect(try await store.pruneIdempotencyKeys(createdBefore: Date().addingTimeInterval(60), keepingNewest: 100) == 3)
        let fresh = try await store.addItem(
            cartID: "c", sku: "s5", quantity: 1, unitPriceCents: 1, idempotencyKey: try IdempotencyKey("k5"))
        #expect(!fresh.isReplay)
        // The log keeps its events, keys and all.
        #expect(try await wholeLog(store).map(\.idempotencyKey) == ["k1", "k2", "k3", "k4", "k5", "k1", "k5"])
    }

    @Test(arguments: Engine.available)
    func aKeyIsAnsweredAfterTheStoreIsReopened(engine: Engine) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let location: String =
            switch engine {
            case .sqlite: directory.path("carts.sqlite")
            case .postgresql: try await SharedPostgres.shared.newDatabase()
            }
        func open() async throws -> CartStore {
            switch engine {
            case .sqlite: try CartStore(path: location)
            case .postgresql: try await PostgresCartStore.running(url: location)
            }
        }
        let key = try IdempotencyKey("k", scope: "alice")
        let store = try await open()
        let first = try await store.addItem(cartID: "c", sku: "a", quantity: 3, unitPriceCents: 7, idempotencyKey: key)
        try store.close()
        let reopened = try await open()
        defer { try? reopened.close() }
        let again = try await reopened.addItem(cartID: "c", sku: "a", quantity: 3, unitPriceCents: 7, idempotencyKey: key)
        #expect(again == first.replayed)
        #expect(try await wholeLog(reopened).map(\.idempotencyKey) == ["k"])
        let error = await #expect(throws: CartStoreError.self) {
            try await reopened.addItem(cartID: "c", sku: "a", quantity: 4, unitPriceCents: 7, idempotencyKey: key)
        }
        #expect(error?.code == .idempotencyKeyReused)
    }

    /// Two stores on one database (two servers): a key used on one is answered on the other,
    /// also when both are asked at once.
    @Test(.tags(.postgres), .outsideTheFastSet, .needsPostgreSQL)
    func aKeyUsedOnOneStoreIsAnsweredOnAnotherOfTheSameDatabase() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let first = try await PostgresCartStore.running(url: url)
        let second = try await PostgresCartStore.running(url: url)
        defer {
            try? first.close()
            try? second.close()
        }
        let key = try IdempotencyKey("k")
        let made = try await first.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1, idempotencyKey: key)
        #expect(try await second.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1, idempotencyKey: key) == made.replayed)
        let both = try IdempotencyKey("both")
        let commits = try await withThrowingTaskGroup(of: CartCommit.self) { group in
            for index in 0..<50 {
                let store = index % 2 == 0 ? first : second
                group.addTask { try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1, idempotencyKey: both) }
            }
            return try await group.reduce(into: [CartCommit]()) { $0.append($1) }
        }
        #expect(commits.count(where: { !$0.isReplay }) == 1)
        #expect(Set(commits.map(\.event.seq)) == [2])
        #expect(try await wholeLog(first).map(\.idempotencyKey) == ["k", "both"])
    }
}

extension CartCommit {
    /// This commit as a repeat of its key is answered.
    var replayed: CartCommit { CartCommit(cart: cart, event: event, isReplay: true) }
}

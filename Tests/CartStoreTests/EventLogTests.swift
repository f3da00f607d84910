import Foundation
import Testing

@testable import CartStore

@Suite("Event log")
struct EventLogTests {
    /// A deterministic mix of every kind of mutation, including refused ones.
    static func churn(_ store: CartStore, steps: Int, seed: UInt64 = 42) async throws {
        var random = SeededRandom(seed: seed)
        for _ in 0..<steps {
            let cart = "cart-\(random.next() % 5)"
            let sku = "sku-\(random.next() % 7)"
            do {
                switch random.next() % 10 {
                case 0..<5:
                    try await store.addItem(
                        cartID: cart, sku: sku, quantity: Int(random.next() % 5) + 1,
                        unitPriceCents: Int(random.next() % 1000), name: "item \(sku)")
                case 5..<7: try await store.setQuantity(cartID: cart, sku: sku, quantity: Int(random.next() % 4))
                case 7..<9: try await store.removeItem(cartID: cart, sku: sku)
                default: try await store.clearCart(cartID: cart)
                }
            } catch let error as CartStoreError where [.cartNotFound, .itemNotFound].contains(error.code) {
                // Refused mutations are part of the mix: they must leave no trace.
            }
        }
    }

    @Test(arguments: Engine.available)
    func seqsAreGapFreeAndFoldingTheLogReproducesTheTables(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await Self.churn(store, steps: 600)
        let log = try await wholeLog(store)
        #expect(!log.isEmpty)
        #expect(log.map(\.seq) == Array(1...Int64(log.count)))
        #expect(try await store.latestSeq() == Int64(log.count))
        #expect(fold(log) == (try await store.carts()))
        // Each cart's versions grow by one per event.
        for cart in try await store.carts() {
            #expect(log.filter { $0.cartID == cart.id }.map(\.version) == Array(1...cart.version))
        }
    }

    @Test(arguments: Engine.available)
    func eventsAfterASeqWithLimitAndCartFilter(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        for index in 1...10 {
            try await store.addItem(cartID: index.isMultiple(of: 2) ? "even" : "odd", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        guard case .events(let page, let latest) = try await store.events(after: 3, limit: 4) else {
            Issue.record("expected events")
            return
        }
        #expect(page.map(\.seq) == [4, 5, 6, 7])
        #expect(latest == 10)
        guard case .events(let evens, _) = try await store.events(after: 0, limit: 100, carts: ["even"]) else {
            Issue.record("expected events")
            return
        }
        #expect(evens.map(\.seq) == [2, 4, 6, 8, 10])
        guard case .events(let none, _) = try await store.events(after: 10) else {
            Issue.record("expected events")
            return
        }
        #expect(none.isEmpty)
    }

    @Test(arguments: Engine.available)
    func badQueriesAreTypedErrors(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        await #expect { try await store.events(after: -1) } throws: { CartStoreError.code($0) == .invalidSince }
        await #expect { try await store.events(after: 2) } throws: { CartStoreError.code($0) == .sinceAhead }
        await #expect { try await store.events(after: 0, limit: 0) } throws: { CartStoreError.code($0) == .invalidLimit }
        await #expect { try await store.events(after: 0, carts: ["no spaces"]) } throws: { CartStoreError.code($0) == .invalidCartID }
    }

    @Test(arguments: Engine.available)
    func pruningByCountAnswersTooOldInsteadOfAGap(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        for index in 1...10 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        #expect(try await store.pruneEvents(keepingLast: 4) == 6)
        #expect(try await store.oldestRetainedSeq() == 7)
        #expect(try await store.events(after: 5) == .tooOld(oldestRetainedSeq: 7, latestSeq: 10))
        guard case .events(let tail, _) = try await store.events(after: 6) else {
            Issue.record("seq 6 is the last pruned: the rest is complete")
            return
        }
        #expect(tail.map(\.seq) == [7, 8, 9, 10])
    }

    @Test(arguments: Engine.available)
    func pruningEverythingKeepsCountingAndNeverReusesSeqs(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        for index in 1...3 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        #expect(try await store.pruneEvents(keepingLast: 0) == 3)
        #expect(try await store.latestSeq() == 3)
        #expect(try await store.oldestRetainedSeq() == 4)
        #expect(try await store.events(after: 3) == .events([], latestSeq: 3))
        #expect(try await store.events(after: 2) == .tooOld(oldestRetainedSeq: 4, latestSeq: 3))
        let next = try await store.addItem(cartID: "c", sku: "s4", quantity: 1, unitPriceCents: 1)
        #expect(next.event.seq == 4)
    }

    @Test(arguments: Engine.available)
    func pruningByAge(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        #expect(try await store.pruneEvents(committedBefore: Date().addingTimeInterval(-3600)) == 0)
        #expect(try await store.pruneEvents(committedBefore: Date().addingTimeInterval(60)) == 1)
        #expect(try await store.latestSeq() == 1)
    }

    @Test(arguments: Engine.available)
    func eventsReadBackEqualTheEventsReturnedAndDelivered(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let observer = RecordingObserver()
        store.observers.add(observer)
        var returned: [CartEvent] = []
        returned.append(try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 5, name: "A").event)
        returned.append(try await store.setQuantity(cartID: "c", sku: "a", quantity: 3).event)
        returned.append(try await store.clearCart(cartID: "c").event)
        #expect(try await wholeLog(store) == returned)
        #expect(observer.received == returned)
    }

    @Test func eventJSONCarriesKindAndRoundTrips() throws {
        let event = CartEvent(
            seq: 9, cartID: "c", change: .itemAdded(item: CartItem(sku: "a", quantity: 2, unitPriceCents: 5), addedQuantity: 2),
            version: 3, committedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let data = try JSONEncoder().encode(event)
        let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        #expect(object?["kind"] as? String == "itemAdded")
        #expect(object?["cartId"] as? String == "c")
        #expect(try JSONDecoder().decode(CartEvent.self, from: data) == event)
    }
}

/// SplitMix64: reproducible pseudo-random numbers for test workloads.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

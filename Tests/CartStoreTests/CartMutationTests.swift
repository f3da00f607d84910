import Testing

@testable import CartStore

@Suite("Cart mutations")
struct CartMutationTests {
    @Test(arguments: Engine.available)
    func addingCreatesTheCartAndAddingAgainGrowsTheLine(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let first = try await store.addItem(cartID: "c1", sku: "apple", quantity: 2, unitPriceCents: 50, name: "Apple")
        #expect(first.cart.version == 1)
        #expect(first.event.seq == 1)
        #expect(
            first.event.change == .itemAdded(item: CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Apple"), addedQuantity: 2)
        )

        try await store.addItem(cartID: "c1", sku: "pear", quantity: 1, unitPriceCents: 80)
        let again = try await store.addItem(cartID: "c1", sku: "apple", quantity: 3, unitPriceCents: 45, name: "Apple")
        #expect(again.cart.version == 3)
        // The line keeps its place and takes the new total and the latest price.
        #expect(again.cart.items.map(\.sku) == ["apple", "pear"])
        #expect(again.cart.items[0] == CartItem(sku: "apple", quantity: 5, unitPriceCents: 45, name: "Apple"))
        #expect(again.cart.totalCents == 5 * 45 + 80)
        #expect(try await store.cart("c1") == again.cart)
    }

    @Test(arguments: Engine.available)
    func setQuantityChangesAndZeroRemoves(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10)
        try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 20)
        let set = try await store.setQuantity(cartID: "c", sku: "a", quantity: 7)
        #expect(set.event.change == .quantityChanged(sku: "a", quantity: 7))
        #expect(set.cart.items.first?.quantity == 7)
        let zero = try await store.setQuantity(cartID: "c", sku: "a", quantity: 0)
        #expect(zero.event.change == .itemRemoved(sku: "a"))
        #expect(try await store.cart("c")?.items.map(\.sku) == ["b"])
    }

    @Test(arguments: Engine.available)
    func removeAndClear(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10)
        try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 20)
        try await store.removeItem(cartID: "c", sku: "a")
        #expect(try await store.cart("c")?.items.map(\.sku) == ["b"])
        let cleared = try await store.clearCart(cartID: "c")
        #expect(cleared.cart.items.isEmpty)
        #expect(cleared.cart.version == 4)
        // A cleared cart still exists, with its version.
        #expect(try await store.cart("c") == Cart(id: "c", version: 4, items: []))
    }

    @Test(arguments: Engine.available)
    func listsCartsByIdAndReadsUnknownCartAsNil(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "b", sku: "x", quantity: 1, unitPriceCents: 1)
        try await store.addItem(cartID: "a", sku: "y", quantity: 2, unitPriceCents: 3)
        #expect(try await store.carts().map(\.id) == ["a", "b"])
        #expect(try await store.cart("nope") == nil)
        let snapshot = try await store.snapshot(of: ["a", "zzz"])
        #expect(snapshot.carts.map(\.id) == ["a"])
        #expect(snapshot.seq == 2)
    }

    /// A set of carts reaches the database as one argument (SQLite: a JSON array): it selects
    /// exactly its carts, in snapshots and in event pages alike, whatever its size.
    @Test(arguments: Engine.available)
    func aSetOfCartsSelectsExactlyThoseCarts(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        for name in ["a", "b", "c.d", "e_f-g"] {
            try await store.addItem(cartID: name, sku: "s", quantity: 1, unitPriceCents: 1)
        }
        let wanted: Set = ["a", "c.d", "nope", "B", "b.", "-b"]
        let snapshot = try await store.snapshot(of: wanted)
        #expect(snapshot.carts.map(\.id) == ["a", "c.d"])
        #expect(snapshot.carts.allSatisfy { $0.items.map(\.sku) == ["s"] })
        #expect(snapshot.seq == 4)
        guard case .events(let events, let latest) = try await store.events(after: 0, carts: wanted) else {
            Issue.record("the log was refused")
            return
        }
        #expect(latest == 4)
        #expect(events.map(\.cartID) == ["a", "c.d"])
        #expect(try await store.snapshot(of: ["e_f-g"]).carts.map(\.id) == ["e_f-g"])
        #expect(try await store.snapshot(of: []).carts.isEmpty)
        #expect(try await store.snapshot(of: nil).carts.map(\.id) == ["a", "b", "c.d", "e_f-g"])
    }

    @Test(arguments: Engine.available)
    func expectedVersionMismatchIsAConflictAndChangesNothing(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        // Version 0 is "does not exist yet".
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, expectedVersion: 0)
        await #expect(throws: CartStoreError.self) {
            try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, expectedVersion: 0)
        }
        do {
            try await store.setQuantity(cartID: "c", sku: "a", quantity: 5, expectedVersion: 7)
            Issue.record("expected a conflict")
        } catch {
            #expect(CartStoreError.code(error) == .versionConflict)
        }
        try await store.clearCart(cartID: "c", expectedVersion: 1)
        #expect(try await store.cart("c")?.version == 2)
        #expect(try await store.latestSeq() == 2)
    }

    @Test(
        arguments: [
            ("", "a", 1, 0, nil, FanoutErrorCode.invalidCartID),
            ("bad id", "a", 1, 0, nil, .invalidCartID),
            (String(repeating: "x", count: 65), "a", 1, 0, nil, .invalidCartID),
            ("c", "sku/1", 1, 0, nil, .invalidSKU),
            ("c", "", 1, 0, nil, .invalidSKU),
            ("c", "a", 0, 0, nil, .invalidQuantity),
            ("c", "a", 10_001, 0, nil, .invalidQuantity),
            ("c", "a", -3, 0, nil, .invalidQuantity),
            ("c", "a", 1, -1, nil, .invalidPrice),
            ("c", "a", 1, 1_000_000_001, nil, .invalidPrice),
            ("c", "a", 1, 0, String(repeating: "n", count: 201), .invalidName),
        ] as [(String, String, Int, Int, String?, FanoutErrorCode)])
    func invalidAddIsRefusedWithItsCodeAndWritesNothing(
        cartID: String, sku: String, quantity: Int, price: Int, name: String?, code: FanoutErrorCode
    ) async throws {
        // Input is checked before any engine is asked: one engine is enough here.
        let store = try CartStore.inMemory()
        let observer = RecordingObserver()
        store.observers.add(observer)
        do {
            try await store.addItem(cartID: cartID, sku: sku, quantity: quantity, unitPriceCents: price, name: name)
            Issue.record("expected \(code)")
        } catch let error as CartStoreError {
            #expect(error.code == code)
            #expect(!error.message.isEmpty)
        }
        #expect(try await store.latestSeq() == 0)
        #expect(try await store.carts().isEmpty)
        #expect(observer.received.isEmpty)
    }

    @Test(arguments: Engine.available)
    func limitsAtTheirEdgesAreAccepted(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        let id = String(repeating: "Z", count: 64)
        let commit = try await store.addItem(
            cartID: id, sku: "a.b_c-9", quantity: 10_000, unitPriceCents: 1_000_000_000,
            name: String(repeating: "é", count: 200))
        #expect(commit.cart.totalCents == 10_000_000_000_000)
    }

    @Test(arguments: Engine.available)
    func overflowingALineIsRefused(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 9_999, unitPriceCents: 1)
        do {
            try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 1)
            Issue.record("expected overflow")
        } catch {
            #expect(CartStoreError.code(error) == .quantityOverflow)
        }
        #expect(try await store.cart("c")?.items.first?.quantity == 9_999)
        #expect(try await store.latestSeq() == 1)
    }

    /// The limit is the store's (`CartMutation.plan`), not an engine's: SQLite alone, as a
    /// thousand sequential commits are slow on PostgreSQL for what they prove.
    @Test func aCartHoldsAtMostTheLineLimit() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<CartLimits.maxItemsPerCart {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        do {
            try await store.addItem(cartID: "c", sku: "one-more", quantity: 1, unitPriceCents: 1)
            Issue.record("expected tooManyItems")
        } catch {
            #expect(CartStoreError.code(error) == .tooManyItems)
        }
        // Adding to an existing line is still fine.
        try await store.addItem(cartID: "c", sku: "s0", quantity: 1, unitPriceCents: 1)
    }

    @Test(arguments: Engine.available)
    func unknownCartsAndItemsAreNotFound(engine: Engine) async throws {
        let store = try await engine.makeStore()
        defer { try? store.close() }
        await #expect { try await store.removeItem(cartID: "ghost", sku: "a") } throws: { CartStoreError.code($0) == .cartNotFound }
        await #expect { try await store.clearCart(cartID: "ghost") } throws: { CartStoreError.code($0) == .cartNotFound }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        await #expect { try await store.removeItem(cartID: "c", sku: "b") } throws: { CartStoreError.code($0) == .itemNotFound }
        await #expect { try await store.setQuantity(cartID: "c", sku: "b", quantity: 2) } throws: {
            CartStoreError.code($0) == .itemNotFound
        }
        await #expect { try await store.setQuantity(cartID: "c", sku: "a", quantity: 10_001) } throws: {
            CartStoreError.code($0) == .invalidQuantity
        }
        #expect(try await store.latestSeq() == 1)
    }
}

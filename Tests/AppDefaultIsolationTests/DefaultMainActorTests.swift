import CartStore
import FanoutClient
import Foundation
import Testing

// This target is built as Xcode 26's app template builds an app: Swift 6 language mode with
// the main actor as the default isolation (`.defaultIsolation(MainActor.self)`, Package.swift).
// Nothing here says `@MainActor`, `nonisolated` or `@preconcurrency`.

/// A view model as such an app writes it: main-actor isolated by default.
final class Basket: MainActorCartObserver {
    var cart: Cart?
    var pending = 0
    var problem: String?
    let store: any CartWriter

    init(_ store: any CartWriter, cart id: String) {
        self.store = store
        store.observers.add(self, carts: .only([id]))
    }

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) { cart = carts.first }
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) { self.cart = cart }
    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) { cart = carts.first }
    func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        self.pending = pending.count
        self.cart = cart
    }
    func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
        problem = error.description
    }

    func add(_ sku: String) async {
        do {
            let write = try await store.addItem(sku, quantity: 1, unitPriceCents: 50, to: "alice")
            if case .rejected(let error) = await store.outcome(of: write) { problem = error.description }
        } catch let error as RemoteStoreError {
            // The form a user writes first: a catch of the store's error, by case.
            if case .tooManyPendingWrites = error { problem = "too many changes waiting" } else { problem = error.description }
        } catch {
            problem = "\(error)"
        }
    }
}

@Suite("An app target with the main actor as default isolation")
struct DefaultMainActorTests {
    @Test func aViewModelAndTheDocCExampleCompileAndTheModelWritesAndFollows() async throws {
        let store = try CartStore.inMemory()
        let basket = Basket(store, cart: "alice")
        await basket.add("apple")
        let deadline = ContinuousClock.now + .seconds(20)
        while basket.cart?.items.first?.sku != "apple", ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(basket.cart?.items.map(\.sku) == ["apple"])
        #expect(basket.problem == nil)
    }
}

import CartStore
import FanoutClient
import FanoutServer
import FanoutTestSupport
import Foundation
import Observation
import Testing

/// A view model written once against `MainActorCartObserver` and `CartWriter`, as an app
/// writes it: attached to an in-process `CartStore` in tests and previews, to a
/// `RemoteCartStore` in the app; it reads and writes both the same way.
@MainActor
final class BasketModel: MainActorCartObserver {
    private(set) var basket: Cart?
    private(set) var changes = 0
    private(set) var connection: CartConnectionState
    private let store: any CartWriter
    private let cartID: String
    /// Why the last change did not go through, for the view.
    private(set) var problem: String?

    init(_ store: any CartWriter, cart id: String) {
        self.store = store
        cartID = id
        connection = store.connectionState
        store.observers.add(self, carts: .only([id]))
    }

    /// One more of `sku`: shown at once (pending, on a server), then as committed; the seq of its
    /// event once it is, nil if it was refused (`problem` says why).
    @discardableResult
    func add(_ sku: String, cents: Int) async -> Int64? {
        do {
            let write = try await store.addItem(sku, quantity: 1, unitPriceCents: cents, to: cartID)
            switch await store.outcome(of: write) {
            case .confirmed(let seq): return seq
            case .rejected(let error): problem = error.description
            case .unknown: problem = "unknown"
            }
        } catch {
            problem = "\(error)"
        }
        return nil
    }

    /// Takes `sku` out of the basket.
    func remove(_ sku: String) async {
        do {
            let write = try await store.removeItem(sku, from: cartID)
            if case .rejected(let error) = await store.outcome(of: write) { problem = error.description }
        } catch {
            problem = "\(error)"
        }
    }

    var total: Int64 { basket?.totalCents ?? 0 }

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        basket = carts.first
    }

    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
        basket = cart
        changes += 1
    }

    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        basket = carts.first
    }

    func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {
        connection = state
    }

    /// What each `didChangePending` said: the pending writes' ids and the cart's lines shown.
    private(set) var pendingSeen: [(ids: [String], skus: [String])] = []

    func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        pendingSeen.append((pending.map(\.id), cart.items.map(\.sku)))
        basket = cart
    }
}

@Suite("One view model, either store", .serialized, .timeLimit(.minutes(2)))
@MainActor
struct OneViewModelTests {
    @Test func theSameViewModelFollowsALocalStoreAndAServerAlike() async throws {
        let (server, api, cleanup) = try await startServer()
        defer { cleanup() }
        let local = try CartStore.inMemory()

        _ = try await api.addItem("apple", quantity: 1, unitPriceCents: 50, to: "alice")
        try await local.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 50)
        let remote = RemoteCartStore(server: api.baseURL)
        let onDevice = BasketModel(local, cart: "alice")
        let fromServer = BasketModel(remote, cart: "alice")
        let localView = ObservedCarts(local, carts: .only(["alice"]))
        let remoteView = ObservedCarts(remote, carts: .only(["alice"]))

        #expect(await until { onDevice.basket?.version == 1 && fromServer.basket?.version == 1 }, "the state first")
        #expect(onDevice.basket == fromServer.basket)
        #expect(await until { localView.isLoaded && remoteView.isLoaded })
        #expect(localView.cart == remoteView.cart)

        _ = try await api.addItem("pear", quantity: 2, unitPriceCents: 80, to: "alice")
        _ = try await api.addItem("fig", quantity: 1, unitPriceCents: 5, to: "bob")
        try await local.addItem(cartID: "alice", sku: "pear", quantity: 2, unitPriceCents: 80)
        try await local.addItem(cartID: "bob", sku: "fig", quantity: 1, unitPriceCents: 5)
        #expect(await until { onDevice.basket?.version == 2 && fromServer.basket?.version == 2 }, "then each change")
        #expect(onDevice.basket == fromServer.basket)
        #expect(onDevice.total == 210)
        #expect(onDevice.changes == 1 && fromServer.changes == 1, "another cart's change is not theirs")
        #expect(await until { localView.cart?.version == 2 && remoteView.cart?.version == 2 })
        #expect(localView.cart == remoteView.cart)
        #expect(onDevice.connection == .live)
        #expect(await until { fromServer.connection == .live })

        // A write through the store shows at once, pending, and then as the server confirmed it.
        let write = try await remote.addItem("kiwi", quantity: 3, unitPriceCents: 10, to: "alice")
        guard case .confirmed(let seq) = await remote.outcome(of: write) else {
            Issue.record("the write was not confirmed")
            return
        }
        await remote.applied(through: seq)
        #expect(await until { !remoteView.hasPendingWrites && remoteView.cart?.version == 3 }, "then confirmed")
        #expect(remoteView.cart?.items.map(\.sku) == ["apple", "pear", "kiwi"])
        #expect(await until { fromServer.pendingSeen.count >= 2 })
        let seen = fromServer.pendingSeen
        #expect(seen.first?.ids == [write.id] && seen.first?.skus == ["apple", "pear", "kiwi"], "shown at once, pending")
        #expect(seen.last?.ids == [] && fromServer.basket?.version == 3, "then as confirmed, nothing pending")
        let refused = try await remote.removeItem("durian", from: "alice")
        #expect(await until { remoteView.lastRejection?.write == refused }, "a refused write is rolled back, and the view told why")
        #expect(remoteView.lastRejection?.error.code == .itemNotFound)
        #expect(await until { !remoteView.hasPendingWrites })

        // Written through the view model, the same call for both stores: committed, shown, and a
        // refusal said (thrown by the local store, rolled back by the server).
        let localSeq = await onDevice.add("plum", cents: 30)
        let remoteSeq = await fromServer.add("plum", cents: 30)
        #expect(localSeq != nil && remoteSeq != nil, "\(onDevice.problem ?? "") \(fromServer.problem ?? "")")
        if let remoteSeq { await remote.applied(through: remoteSeq) }
        #expect(await until { onDevice.basket?.items.last?.sku == "plum" && fromServer.basket?.items.last?.sku == "plum" })
        #expect(onDevice.problem == nil && fromServer.problem == nil)
        await onDevice.remove("durian")
        await fromServer.remove("durian")
        #expect(onDevice.problem?.contains("item_not_found") == true, "\(onDevice.problem ?? "none")")
        #expect(fromServer.problem?.contains("item_not_found") == true, "\(fromServer.problem ?? "none")")

        try local.close()
        #expect(await until { onDevice.connection == .closed && localView.connection == .closed }, "a closed store says so")
        await remote.close()
        #expect(await until { fromServer.connection == .closed && remoteView.connection == .closed })
        try await server.stop()
    }
}

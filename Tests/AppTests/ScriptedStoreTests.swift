import FanoutClient
import FanoutTesting
import Foundation
import Testing

/// What an app's own tests and previews do with `ScriptedCartStore`: the view model and the
/// view of `OneViewModelTests`, unchanged, shown every state a server can put them in, without
/// a server.
@Suite("A scripted store for an app's tests and previews", .timeLimit(.minutes(1)))
@MainActor
struct ScriptedStoreTests {
    static let apple = CartWrite.addItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: nil)

    @Test func aViewModelSeesItsCartThenEachChangeAndTheConnectionAsScripted() async throws {
        let store = ScriptedCartStore(carts: [Cart(id: "alice")])
        let model = BasketModel(store, cart: "alice")
        let view = ObservedCarts(store, carts: .only(["alice"]))
        #expect(await until { model.basket?.version == 0 && view.isLoaded }, "the cart's state first")

        // A change made elsewhere, as the server sends it.
        let event = try store.emit(Self.apple, to: "alice")
        #expect(event.seq == 1 && event.version == 1)
        #expect(await until { model.basket?.items.map(\.sku) == ["apple"] && view.cart?.totalCents == 100 })
        #expect(model.changes == 1)
        try store.emit(.addItem(sku: "fig", quantity: 1, unitPriceCents: 5, name: nil), to: "bob")
        #expect(throws: FanoutError.self, "a write the cart refuses changes nothing") {
            try store.emit(.removeItem(sku: "durian"), to: "alice")
        }

        // Every state the view branches on.
        for state: CartConnectionState in [
            .reconnecting(.unreachable("connection refused")),
            .refused(.refused(status: 401, code: .invalidToken, rawCode: "invalid_token", message: "expired")),
            .live,
        ] {
            store.setConnection(state)
            #expect(await until { model.connection == state && view.connection == state }, "\(state)")
        }
        #expect(model.changes == 1, "bob's cart is not this model's")

        // Carts replaced, as after a server's pruned log.
        store.replaceCarts([Cart(id: "alice")], because: .historyPruned)
        #expect(await until { view.lastResync == .historyPruned && model.basket?.items.isEmpty == true })
    }

    @Test func writesAreConfirmedAtOnceOrHeldUntilTheScriptConfirmsOrRejectsThem() async throws {
        let store = ScriptedCartStore()
        let model = BasketModel(store, cart: "alice")
        let view = ObservedCarts(store, carts: .only(["alice"]))
        #expect(await until { view.isLoaded })

        // Confirmed at once: shown pending, then committed.
        let seq = await model.add("apple", cents: 50)
        #expect(seq == 1 && store.cart("alice")?.version == 1)
        #expect(await until { model.basket?.version == 1 && !view.hasPendingWrites })
        #expect(model.pendingSeen.first?.skus == ["apple"] && model.pendingSeen.last?.ids == [], "pending, then nothing pending")

        // Held, as offline: pending until the script says.
        store.writeHandling = .hold
        let pear = try await store.addItem("pear", quantity: 1, unitPriceCents: 80, to: "alice")
        #expect(await until { view.pending["alice"]?.map(\.id) == [pear.id] && view.cart?.items.map(\.sku) == ["apple", "pear"] })
        #expect(store.cart("alice")?.version == 1, "not committed while held")
        let outcome = Task { await store.outcome(of: pear) }
        store.confirm(pear)
        guard case .confirmed(let pearSeq) = await outcome.value else {
            Issue.record("the held write was not confirmed")
            return
        }
        #expect(pearSeq == 2)
        #expect(await until { !view.hasPendingWrites && view.cart?.version == 2 })

        // Rejected: rolled back, and the model and the view say why.
        let conflict = RemoteStoreError.refused(
            status: 409, code: .versionConflict, rawCode: "version_conflict", message: "changed meanwhile")
        let kiwiTask = Task { await model.add("kiwi", cents: 10) }
        #expect(await until { view.pending["alice"]?.count == 1 })
        let kiwi = try #require(store.pendingWrites.first)
        store.reject(kiwi, because: conflict)
        #expect(await kiwiTask.value == nil)
        #expect(model.problem == conflict.description)
        #expect(await until { view.lastRejection?.write == kiwi && !view.hasPendingWrites })
        #expect(view.cart?.items.map(\.sku) == ["apple", "pear"], "rolled back")

        // A write the cart refuses when confirmed is rejected as the server would.
        let durian = try await store.removeItem("durian", from: "alice")
        store.confirmPendingWrites()
        guard case .rejected(let error) = await store.outcome(of: durian) else {
            Issue.record("a write the cart refuses was confirmed")
            return
        }
        #expect(error.code == .itemNotFound)
        await #expect(throws: RemoteStoreError.self, "a value the rules refuse is not taken") {
            try await store.addItem("apple", quantity: 0, unitPriceCents: 50, to: "alice")
        }
    }

    @Test func aPreviewShowsWhoElseIsLookingAndACartRefused() async throws {
        let store = ScriptedCartStore(carts: [Cart(id: "alice")])
        let since = Date(timeIntervalSince1970: 1_800_000_000)
        let bob = PresenceMember(user: "bob", member: "phone", state: ["screen": "cart"], since: since)
        store.setPresence([bob], of: "alice")
        // Told the presence with the carts, as a store that already had it.
        let view = ObservedCarts(store, carts: .only(["alice", "carol"]))
        #expect(await until { view.presence["alice"] == [bob] })
        let eve = PresenceMember(user: "eve", member: "laptop", since: since.addingTimeInterval(5))
        store.changePresence(of: "alice", .joined(eve))
        #expect(await until { view.presence["alice"] == [bob, eve] }, "oldest first")
        store.changePresence(of: "alice", .left(bob.id, reason: .closed))
        #expect(await until { view.presence["alice"] == [eve] })
        let full = RemoteStoreError.refused(status: 409, code: .presenceFull, rawCode: "presence_full", message: "10 members")
        store.changePresence(of: "alice", .unavailable(full))
        #expect(await until { view.presenceUnavailable["alice"]?.code == .presenceFull && view.presence["alice"] == nil })

        let forbidden = RemoteStoreError.refused(status: 403, code: .forbiddenCart, rawCode: "forbidden_cart", message: "not yours")
        store.refuse("carol", because: forbidden)
        #expect(await until { view.refused["carol"]?.code == .forbiddenCart })
        let later = ObservedCarts(store, carts: .only(["alice", "carol"]))
        #expect(await until { later.isLoaded && later.refused["carol"] != nil }, "a later view is told the refusal too")
        #expect(later.carts.map(\.id) == ["alice"], "and not given the refused cart")
    }

    @Test func aReleasedViewDropsOutWithoutBeingRemoved() async throws {
        let store = ScriptedCartStore(carts: [Cart(id: "alice")])
        var view: ObservedCarts? = ObservedCarts(store, carts: .only(["alice"]))
        #expect(await until { view?.isLoaded == true })
        #expect(store.observers.count == 1)
        view = nil
        #expect(store.observers.count == 0, "held weakly")
        try store.emit(Self.apple, to: "alice")
    }
}

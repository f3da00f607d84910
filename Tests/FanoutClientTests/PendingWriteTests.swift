import FanoutClient
import FanoutTestSupport
import Foundation
import Testing

/// Writes through a `RemoteCartStore`: shown at once as pending, sent in order (also after the
/// server comes back), confirmed by their events, or rolled back when the server refuses them.
@Suite("Pending writes", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct PendingWriteTests {
    @Test func writesMadeWhileTheServerIsDownShowAtOnceThenReachItInOrder() async throws {
        let started = ContinuousClock.now
        let (server, store, recorder) = try await Self.following("p")
        let following = started.duration(to: .now)
        let stoppedCleanly = await server.halt()
        let stopped = started.duration(to: .now)

        var writes: [PendingWrite] = []
        var expected = try #require(store.cart("p"))
        for index in 0..<20 {
            let write: CartWrite =
                switch index % 4 {
                case 0, 1: .addItem(sku: "s\(index / 4)", quantity: 1 + index % 3, unitPriceCents: 100, name: nil)
                case 2: .setQuantity(sku: "s\(index / 4)", quantity: 7)
                default: .removeItem(sku: "seed")
                }
            writes.append(try await store.write(write, to: "p"))
            expected = expected.applying([writes[index]])
            // Told before the call returned (an observer without a queue runs in it).
            let last = try #require(recorder.shown.last)
            #expect(last.pending.map(\.id) == writes.map(\.id), "every write so far, pending, in order")
            #expect(last.cart.items == expected.items, "the cart shown is the confirmed one with the pending writes applied")
        }
        #expect(store.pendingWrites.count == 20)

        try await server.start()
        let restarted = started.duration(to: .now)
        await eventually(
            "every write confirmed or refused",
            explaining: {
                "following after \(following), stopped (cleanly: \(stoppedCleanly)) after \(stopped), restarted after \(restarted)\n"
                    + (await explain(store: store, server: server))
            }
        ) { store.pendingWrites.isEmpty }
        var seqs: [Int64] = []
        for (index, write) in writes.enumerated() {
            switch await store.outcome(of: write) {
            case .confirmed(let seq):
                seqs.append(seq)
            case .rejected(let error):
                // The line "seed" goes with the first removal; the later ones find nothing.
                #expect(index % 4 == 3 && index > 3 && error.code == .itemNotFound, "write \(index) refused: \(error)")
            case .unknown:
                Issue.record("write \(index) is unknown to its store")
            }
        }
        #expect(seqs.count == 16 && seqs == seqs.sorted() && Set(seqs).count == 16, "sent in the order they were made, each once")
        let remote = try await server.carts()
        let p = try #require(remote["p"])
        #expect(p.items == expected.items, "the server made of them what the store showed")
        #expect(try await server.log().filter { $0.cartID == "p" }.count == 17, "the seed and each write taken, once")
        #expect(recorder.record.withLockedValue { $0.rejections.count } == 4)
        await store.applied(through: seqs.last ?? 0)
        #expect(store.cart("p") == p, "read your writes: the replica has applied the last one")
        let last = try #require(recorder.shown.last)
        #expect(last.pending.isEmpty && last.cart == p, "nothing pending; the confirmed cart shown")
        withExtendedLifetime(recorder) {}
        await store.close()
        await server.stop()
    }

    @Test func aRefusedWriteIsRolledBackWithTheServersReasonAndTheNextOnesGoOn() async throws {
        let (server, store, recorder) = try await Self.following("r")
        let version = try #require(store.cart("r")).version

        let conflicting = try await store.addItem("late", quantity: 1, unitPriceCents: 5, to: "r", expectedVersion: version + 5)
        let missing = try await store.removeItem("nothing-here", from: "r")
        let fine = try await store.addItem("ok", quantity: 2, unitPriceCents: 5, to: "r", expectedVersion: version)
        #expect(store.pendingWrites.map(\.id) == [conflicting.id, missing.id, fine.id])

        guard case .rejected(let conflict) = await store.outcome(of: conflicting) else {
            Issue.record("the write against a version the cart is not at was taken")
            return
        }
        #expect(conflict.code == .versionConflict && conflict.currentVersion == version)
        guard case .rejected(let notFound) = await store.outcome(of: missing) else {
            Issue.record("the removal of a line that is not there was taken")
            return
        }
        #expect(notFound.code == .itemNotFound)
        guard case .confirmed(let seq) = await store.outcome(of: fine) else {
            Issue.record("the write after two refusals did not go")
            return
        }
        await store.applied(through: seq)
        let cart = try #require(store.cart("r"))
        #expect(cart.items.map(\.sku) == ["seed", "ok"], "the refused writes left nothing")
        #expect(recorder.record.withLockedValue { $0.rejections.map(\.write.id) } == [conflicting.id, missing.id])
        await eventually("the last view shows the confirmed cart") {
            recorder.shown.last.map { $0.pending.isEmpty && $0.cart == cart } ?? false
        }
        withExtendedLifetime(recorder) {}
        await store.close()
        await server.stop()
    }

    @Test func twoStoresEditingOneCartOfflineAgainstOneVersionOneWinsTheOtherIsToldWhy() async throws {
        let (server, alice, aliceSees) = try await Self.following("shared", kind: .process)
        let bob = RemoteCartStore(server: server.url)
        let bobSees = Recorder()
        bob.observers.add(bobSees, carts: .only(["shared"]))
        await eventually("bob loaded") { bobSees.isLoaded }
        let version = try #require(alice.cart("shared")).version
        server.freeze()
        let fromAlice = try await alice.addItem("tea", quantity: 1, unitPriceCents: 300, to: "shared", expectedVersion: version)
        let fromBob = try await bob.addItem("coffee", quantity: 1, unitPriceCents: 400, to: "shared", expectedVersion: version)
        let laterFromAlice = try await alice.addItem("milk", quantity: 1, unitPriceCents: 90, to: "shared")
        let laterFromBob = try await bob.addItem("sugar", quantity: 1, unitPriceCents: 50, to: "shared")
        server.thaw()

        var confirmed = 0
        var refusals: [RemoteStoreError] = []
        for (store, write) in [(alice, fromAlice), (bob, fromBob)] {
            switch await store.outcome(of: write) {
            case .confirmed: confirmed += 1
            case .rejected(let error): refusals.append(error)
            case .unknown: Issue.record("\(write.id) unknown")
            }
        }
        #expect(confirmed == 1 && refusals.count == 1, "exactly one of the two writes against version \(version) wins")
        #expect(refusals.first?.code == .versionConflict)
        for (store, write) in [(alice, laterFromAlice), (bob, laterFromBob)] {
            guard case .confirmed = await store.outcome(of: write) else {
                Issue.record("a later write did not go after the refusal")
                continue
            }
        }
        let told = aliceSees.record.withLockedValue(\.rejections).count + bobSees.record.withLockedValue(\.rejections).count
        #expect(told == 1, "the loser's observer is told, with the server's reason")
        let remote = try #require(try await server.carts()["shared"])
        let winner = aliceSees.record.withLockedValue(\.rejections).isEmpty ? "tea" : "coffee"
        #expect(Set(remote.items.map(\.sku)) == ["seed", winner, "milk", "sugar"], "the winner's write and both later ones, once")
        withExtendedLifetime(bobSees) {}
        await alice.close()
        await bob.close()
        await server.stop()
    }

    @Test func aWriteThatWaitsLongerThanItsLifetimeIsRolledBackNotSent() async throws {
        let (server, _, recorder) = try await Self.following("late")
        await server.halt()
        let store = RemoteCartStore(server: server.url, pendingWriteLifetime: .milliseconds(300))
        let other = Recorder()
        store.observers.add(other, carts: .only(["late"]))
        let write = try await store.addItem("stale", quantity: 1, unitPriceCents: 1, to: "late")
        guard case .rejected(let error) = await store.outcome(of: write), case .pendingWriteExpired = error else {
            Issue.record("a write past its lifetime was not rolled back")
            return
        }
        #expect(store.pendingWrites.isEmpty)
        try await server.start()
        let fresh = try await store.addItem("fresh", quantity: 1, unitPriceCents: 1, to: "late")
        guard case .confirmed = await store.outcome(of: fresh) else {
            Issue.record("the next write did not go")
            return
        }
        #expect(try await server.log().filter { $0.cartID == "late" }.map(\.change.kind) == [.itemAdded, .itemAdded])
        #expect(try await server.carts()["late"]?.items.map(\.sku) == ["seed", "fresh"], "the expired write was never sent")
        withExtendedLifetime((recorder, other)) {}
        await store.close()
        await server.stop()
    }

    /// A server with `cart` (one line, `seed`), and a store whose observer has loaded it.
    static func following(
        _ cart: String, kind: ServerUnderTest.Kind = .inProcess
    ) async throws -> (ServerUnderTest, RemoteCartStore, Recorder) {
        let server = try await ServerUnderTest(kind: kind)
        await server.add(cart, "seed")
        let store = RemoteCartStore(server: server.url)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only([cart]))
        await eventually("loaded") { recorder.isLoaded }
        return (server, store, recorder)
    }

    @Test func pastTheLimitAWriteIsRefusedAndNothingIsDropped() async throws {
        let server = try await ServerUnderTest(kind: .process)
        // Frozen: the first write waits for its answer, the others behind it.
        server.freeze()
        let store = RemoteCartStore(server: server.url)
        for index in 0..<RemoteCartStore.maxPendingWrites {
            try await store.addItem("s\(index % 50)", quantity: 1, unitPriceCents: 1, to: "full")
        }
        await #expect(throws: RemoteStoreError.self) { try await store.addItem("one-more", quantity: 1, unitPriceCents: 1, to: "full") }
        #expect(store.pendingWrites.count == RemoteCartStore.maxPendingWrites, "every write taken is still pending")
        await #expect(throws: RemoteStoreError.self, "bad values are refused before they are taken") {
            try await store.addItem("bad sku", quantity: 1, unitPriceCents: 1, to: "x")
        }
        await store.close()
        server.thaw()
        await server.stop()
    }
}

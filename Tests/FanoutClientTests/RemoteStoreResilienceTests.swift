import Dispatch
import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import Testing

/// No error, at any step, ends a store's work while an observer lives: a cart an observer may
/// not see is that observer's refusal, the others carry on; a server that is down while the
/// interest changes is retried until it is back. Against real `fanout-server` processes.
@Suite("Remote cart store off the happy path", .serialized, .timeLimit(.minutes(3)))
struct RemoteStoreResilienceTests {
    /// A store live for `a`, with a token for `a` alone, is asked for `b`: once the connection
    /// closed, nobody was told, the state still said live, and `a`'s events never came again.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func aForbiddenCartIsItsObserversRefusalAndTheOthersCarryOn(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(["--token", "operator", "--jwt-secret", RemoteStoreTokenTests.secret])
        let writer = CartServerAPI(baseURL: server.url, credentials: .token("operator"))
        _ = try await writer.addItem("seed", quantity: 1, unitPriceCents: 1, to: "a")
        let token = try await RemoteStoreTokenTests.mint(["--sub", "alice", "--carts", "a", "--scope", "read", "--ttl", "1h"])
        let store = RemoteCartStore(server: server.url, transport: transport, credentials: .token(token))
        let mine = Recorder()
        store.observers.add(mine, carts: .only(["a"]))
        await eventually("a loaded") { mine.isLoaded && store.connectionState == .live }

        var theirs: Recorder? = Recorder()
        store.observers.add(theirs!, carts: .only(["b"]))
        await eventually("b refused") { theirs!.refusals.contains { $0.carts == ["b"] && $0.error.code == .forbiddenCart } }
        #expect(!theirs!.isLoaded, "a refused cart is never loaded")
        _ = try await writer.addItem("after-refusal", quantity: 1, unitPriceCents: 1, to: "a")
        await eventually("a's event after the refusal") { mine.events.contains { $0.addedSKU == "after-refusal" } }
        #expect(store.connectionState == .live)

        theirs = nil
        _ = try await writer.addItem("after-release", quantity: 1, unitPriceCents: 1, to: "a")
        await eventually("a's event after b's observer was released") { mine.events.contains { $0.addedSKU == "after-release" } }
        let another = Recorder()
        store.observers.add(another, carts: .only(["a"]))
        await eventually("another observer of a loaded") { another.isLoaded }
        #expect(another.record.withLockedValue { $0.loaded } == [try await writer.cart("a").cart], "the current a, not a stale one")
        #expect(mine.record.withLockedValue { $0.states }.allSatisfy { !$0.isRefused }, "a's observer is never told it is refused")
        await server.stop()
    }

    /// The server is stopped, an observer of a new cart is added while it is down, and the
    /// server comes back: the store once stayed `reconnecting` for good.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func interestThatChangesWhileTheServerIsDownIsServedOnceItIsBack(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        await server.add("c", "seed")
        let store = RemoteCartStore(server: server.url, transport: transport)
        let first = Recorder()
        store.observers.add(first, carts: .only(["a"]))
        await eventually("a loaded") { first.isLoaded && store.connectionState == .live }

        await server.halt()
        await eventually("the store sees the server gone") { store.connectionState != .live }
        let second = Recorder()
        store.observers.add(second, carts: .only(["c"]))
        // The new cart's read fails while the server is down: said as such, and retried.
        let unreachable = await eventually("the store says the server is unreachable") {
            if case .reconnecting(let problem) = store.connectionState { problem.isUnreachable } else { false }
        }
        #expect(unreachable, "states: \(first.record.withLockedValue { $0.states })")
        try await server.start()
        await eventually(timeout: .seconds(20), "c loaded once the server is back") { second.isLoaded }
        await eventually("live again") { store.connectionState == .live }
        await server.add("a", "later")
        await eventually("a's events flow again") { first.events.contains { $0.addedSKU == "later" } }
        await server.stop()
    }

    /// A store refused for one cart, given an observer it may serve: it never says 401 with a
    /// valid token (an app signs its user out on 401).
    @Test func aRefusalIsNeverReportedAsAnotherOne() async throws {
        let server = try await ServerUnderTest(["--token", "operator", "--jwt-secret", RemoteStoreTokenTests.secret])
        let writer = CartServerAPI(baseURL: server.url, credentials: .token("operator"))
        _ = try await writer.addItem("seed", quantity: 1, unitPriceCents: 1, to: "a")
        let token = try await RemoteStoreTokenTests.mint(["--sub", "alice", "--carts", "a", "--scope", "read", "--ttl", "1h"])
        let store = RemoteCartStore(server: server.url, credentials: .token(token))
        let refused = Recorder()
        store.observers.add(refused, carts: .only(["b"]))
        await eventually("b refused") { !refused.refusals.isEmpty }
        let allowed = Recorder()
        store.observers.add(allowed, carts: .only(["a"]))
        await eventually("a loaded") { allowed.isLoaded }
        let states = allowed.record.withLockedValue { $0.states } + refused.record.withLockedValue { $0.states }
        for state in states {
            if case .refused(let error) = state { #expect(error.code != .unauthorized, "a valid token was reported as 401: \(state)") }
        }
        #expect(refused.refusals.allSatisfy { $0.error.code == .forbiddenCart })
        withExtendedLifetime(refused) {}
        await server.stop()
    }
}

/// A store's end that an app can see.
@Suite("Remote cart store lifecycle", .serialized, .timeLimit(.minutes(2)))
struct RemoteStoreLifecycleTests {
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func closeTellsEveryObserverClosesTheConnectionAndCallsNobodyAfter(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url, transport: transport)
        let recorder = Recorder(queue: DispatchQueue(label: "observer"))
        store.observers.add(recorder, carts: .only(["a"]), queue: recorder.queue)
        let updates = store.updates(of: .only(["a"]))
        let live = await eventually("live") { recorder.isLoaded && store.connectionState == .live }
        if !live {
            Issue.record(
                "not live: \(store.connectionState), loaded \(recorder.isLoaded), \(recorder.record.withLockedValue { $0.states })")
        }
        await eventually("one subscriber") { await server.subscribers() == 1 }

        await store.close()
        #expect(store.connectionState == .closed)
        await eventually("the server sees the subscriber leave") { await server.subscribers() == 0 }
        await eventually("the observer told, last") { recorder.record.withLockedValue { $0.states.last } == .closed }
        var last: RemoteCartUpdate?
        for await update in updates { last = update }
        if case .connection(.closed) = last {} else { Issue.record("the updates end with .closed, not \(String(describing: last))") }

        // A witness that the write was delivered: nothing reaches the closed store's observer.
        let witnessStore = RemoteCartStore(server: server.url)
        let witness = Recorder()
        witnessStore.observers.add(witness, carts: .only(["a"]))
        await eventually("the witness loaded") { witness.isLoaded }
        let callbacks = recorder.record.withLockedValue { $0.events.count + $0.states.count + $0.loads }
        await server.add("a", "after-close")
        await eventually("the witness got the write") { witness.events.contains { $0.addedSKU == "after-close" } }
        recorder.queue?.sync {}
        #expect(recorder.record.withLockedValue { $0.events.count + $0.states.count + $0.loads } == callbacks, "no callback after close")
        await witnessStore.close()
        await server.stop()
    }
}

extension CartEvent {
    /// The sku of an `itemAdded` event.
    var addedSKU: String? { if case .itemAdded(let item, _) = change { item.sku } else { nil } }
}

extension RemoteCartStore.ConnectionState {
    var isRefused: Bool { if case .refused = self { true } else { false } }
}

import FanoutClient
import FanoutServer
import FanoutTestSupport
import Foundation
import Observation
import Synchronization
import Testing

/// What an iOS developer writes first, in Swift 6 language mode with nothing added: a
/// `@MainActor` view model that observes a server's cart, and an `@Observable` view of it.
/// Against the real server, run in the test process.

/// A view model, as an app writes it.
@MainActor
final class CartViewModel: MainActorCartObserver {
    var cart: Cart?
    var connection: CartConnectionState = .idle
    /// Callbacks that came off the main queue (the main actor's executor).
    var offMain = 0

    /// Marks the main queue, so that a callback can tell it runs there.
    nonisolated static let mainQueueKey: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    private var onMainQueue: Bool { DispatchQueue.getSpecific(key: Self.mainQueueKey) == true }

    func cartSource(_ store: any CartSource, didLoad carts: [Cart]) {
        if !onMainQueue { offMain += 1 }
        cart = carts.first
    }

    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) {
        if !onMainQueue { offMain += 1 }
        self.cart = cart
    }

    func cartSource(_ store: any CartSource, connectionDidChange state: CartConnectionState) {
        connection = state
    }
}

/// Waits on the main actor, polling, until `condition` holds or `timeout` passes.
@MainActor
func until(_ timeout: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return true
}

/// The server (`fanout-server --port 0`, in the test process) on a new database, and its API.
func startServer() async throws -> (InProcessServer, CartServerAPI, @Sendable () -> Void) {
    let (database, cleanup) = try Mutations.temporaryDatabase()
    let server = try await InProcessServer(
        arguments: ["--port", "0", "--db", database], logger: RecentLogLines().logger(), eventLoopGroup: .shared(inProcessServerLoops))
    return (server, CartServerAPI(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!), cleanup)
}

@Suite("An app's first hour", .serialized, .timeLimit(.minutes(2)))
@MainActor
struct MainActorObserverTests {
    @Test func aMainActorViewModelFollowsACartOnTheMainActor() async throws {
        let (server, api, cleanup) = try await startServer()
        defer { cleanup() }
        _ = try await api.addItem("apple", quantity: 1, unitPriceCents: 50, to: "alice")

        let store = RemoteCartStore(server: api.baseURL)
        _ = CartViewModel.mainQueueKey
        let model = CartViewModel()
        store.observers.add(model, carts: .only(["alice"]))
        #expect(await until { model.cart?.version == 1 }, "the cart as it is, first")
        _ = try await api.addItem("pear", quantity: 2, unitPriceCents: 80, to: "alice")
        #expect(await until { model.cart?.version == 2 }, "then each change")
        #expect(model.cart?.items.map(\.sku) == ["apple", "pear"])
        #expect(model.connection == .live)
        #expect(model.offMain == 0, "every callback on the main actor")
        #expect(store.observers.contains(model))
        store.observers.remove(model)
        #expect(!store.observers.contains(model))
        try await server.stop()
    }

    @Test func anObservableCartTellsTheViewWhatChanged() async throws {
        let (server, api, cleanup) = try await startServer()
        defer { cleanup() }
        _ = try await api.addItem("apple", quantity: 1, unitPriceCents: 50, to: "alice")
        let store = RemoteCartStore(server: api.baseURL)

        var basket: ObservedCarts? = ObservedCarts(store, carts: .only(["alice"]))
        #expect(await until { basket?.isLoaded == true })
        #expect(basket?.cart?.totalCents == 50)
        // What SwiftUI does: read inside a tracking scope, and hear of the next change.
        let changed = Changed()
        withObservationTracking {
            _ = basket?.cart
        } onChange: {
            changed.set()
        }
        _ = try await api.addItem("apple", quantity: 1, unitPriceCents: 50, to: "alice")
        #expect(await until { changed.isSet }, "a change of the cart reaches the view")
        #expect(await until { basket?.cart?.totalCents == 100 })
        #expect(basket?.connection == .live)

        // Held weakly, like any observer: released, the store closes its connection.
        weak let released = basket
        basket = nil
        #expect(released == nil)
        #expect(await until { store.connectionState == .idle }, "the connection closes once nothing observes")
        try await server.stop()
    }
}

/// A flag set from `onChange` (which may run on any thread).
final class Changed: Sendable {
    private let flag = Atomic(false)
    func set() { flag.store(true, ordering: .releasing) }
    var isSet: Bool { flag.load(ordering: .acquiring) }
}

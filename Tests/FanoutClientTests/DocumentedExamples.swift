import FanoutClient
import Foundation

/// The README's FanoutClient block and the DocC article's first block, as written there (the
/// tests in `ReadmeClientExampleTests` check that they are). One file in two test targets (a
/// link in `Tests/AppDefaultIsolationTests`): compiled in Swift 6 mode, and with the main actor
/// as the default isolation, as Xcode 26's app template builds.
enum DocumentedExamples {
    /// This file.
    static let file = URL(fileURLWithPath: #filePath)

    /// Never called: it needs a server on port 8080.
    @MainActor static func docCExample() {
        // DocC block begins
        // A view model: called on the main actor, held weakly by the store.
        @MainActor final class CartScreen: MainActorCartObserver {
            var cart: Cart?
            func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
                cart = carts.first
            }
            func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
                self.cart = cart
            }
        }

        // The provider is your app's own way to its user's signed token (its sign-in, its
        // backend), asked before each connection and before the token expires: the open connection
        // takes the fresh token in band, so a token's end never drops it.
        let store = RemoteCartStore(
            server: URL(string: "http://127.0.0.1:8080")!,
            credentials: .provider { UserDefaults.standard.string(forKey: "fanout-token") })
        let screen = CartScreen()
        store.observers.add(screen, carts: .only(["alice"]))
        // DocC block ends
        _ = (store, screen)
    }

    /// Never called: it needs a server on port 8080.
    static func example() async throws {
        // README block begins
        let store = RemoteCartStore(server: URL(string: "http://127.0.0.1:8080")!)

        final class CartBadge: CartObserver {
            func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
                print("now:", carts.map { "\($0.id): \($0.itemCount) items" })
            }
            func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
                print("#\(event.seq) \(cart.id) v\(cart.version): \(cart.itemCount) items")
            }
        }
        let badge = CartBadge()
        // Held weakly, told alice's cart as it is, then each of its events once, in order, on
        // the queue. The first observer opens the connection; releasing the last closes it.
        store.observers.add(badge, carts: .only(["alice"]), queue: DispatchQueue(label: "badge"))

        let answer = try await store.server.addItem("apple", quantity: 2, unitPriceCents: 50, to: "alice")
        print(answer.cart.version, "delivered to", answer.deliveredTo, "subscribers")
        print(store.cart("alice")?.itemCount ?? 0)  // the replica, read synchronously

        for await update in store.updates(of: .only(["alice"])) {  // the same, for async code
            if case .applied(let event, let cart) = update { print(event.seq, cart.totalCents) }
        }
        // README block ends
    }

    /// Never called: it needs a server. "Working offline"'s first block.
    @MainActor static func workingOfflineExample(serverURL: URL, credentials: Credentials) async throws {
        // Working offline block begins
        let support = try FileManager.default.url(for: .applicationSupportDirectory, in: .userDomainMask, appropriateFor: nil, create: true)
        let store = RemoteCartStore(server: serverURL, credentials: credentials, cacheFile: support.appending(path: "carts.sqlite"))
        let basket = ObservedCarts(store, carts: .only(["alice"]))  // the cached cart at once

        let write = try await store.addItem("apple", quantity: 2, unitPriceCents: 50, to: "alice")
        // basket.cart shows the apples now; basket.pending["alice"] holds the write.
        switch await store.outcome(of: write) {
        case .confirmed(let seq): await store.applied(through: seq)  // read your write
        case .rejected(let error): print(error)  // rolled back, and why
        case .unknown: break
        }
        // Working offline block ends
        _ = basket
    }
}

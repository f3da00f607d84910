import Dispatch
import FanoutClient
import Foundation
import Testing

/// README "Observing a server's carts from Swift": the block between the markers is the
/// README's Swift block that imports FanoutClient, compiled with this test target against the
/// library as it is, so the example cannot name an API that is gone.
@Suite("README client example")
struct ReadmeClientExampleTests {
    @Test func theREADMEsClientBlockIsTheCompiledOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: repository.appending(path: "README.md"), encoding: .utf8)
        let head = "import FanoutClient\nimport Foundation\n\n"
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
            .filter { $0.hasPrefix("import FanoutClient\n") }
        #expect(blocks.count == 1, "one FanoutClient block in the README, kept compiled here")
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let compiled = source.components(separatedBy: "        // README block begins\n")[1]
            .components(separatedBy: "        // README block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(blocks.first == head + unindented.trimmingCharacters(in: .newlines))
    }

    /// The article "Observing carts on a server" opens with a block compiled here the same way.
    @Test func theDocCArticlesBlockIsTheCompiledOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let article = try String(
            contentsOf: repository.appending(path: "Sources/FanoutClient/FanoutClient.docc/ObservingCartsOnAServer.md"), encoding: .utf8)
        let head = "import FanoutClient\nimport Foundation\n\n"
        let block = article.components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "\n```")[0]
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let compiled = source.components(separatedBy: "        // DocC block begins\n")[1]
            .components(separatedBy: "        // DocC block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(block == head + unindented.trimmingCharacters(in: .newlines))
    }

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
}

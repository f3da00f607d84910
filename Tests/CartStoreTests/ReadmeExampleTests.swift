import CartStore
import Foundation
import Testing

/// README "CartStore in a minute", and the opening block of the DocC article "Observing carts in
/// process": the blocks between the markers are those, compiled with this test target against
/// the library as it is. The README's is its Swift block that imports CartStore (FanoutClientTests keeps the FanoutClient one), compiled with
/// this test target against the library as it is, so the example cannot name an API that is
/// gone. (It is compiled, not run: it writes `carts.sqlite` into the working directory.)
@Suite("README example")
struct ReadmeExampleTests {
    @Test func theREADMEsSwiftBlockIsTheCompiledOne() throws {
        let readme = try String(contentsOf: Self.repository.appending(path: "README.md"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
            .filter { $0.hasPrefix("import CartStore\n") }
        #expect(blocks.count == 1, "one CartStore block in the README, kept compiled here; another needs its own")
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let begins = "        // README block begins\n"
        let ends = "        // README block ends"
        let compiled = source.components(separatedBy: begins)[1].components(separatedBy: ends)[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(blocks.first == "import CartStore\n\n" + unindented.trimmingCharacters(in: .newlines))
    }

    /// The article "Observing carts in process" opens with a block compiled here the same way.
    @Test func theDocCArticlesBlockIsTheCompiledOne() throws {
        let article = try String(
            contentsOf: Self.repository.appending(path: "Sources/CartStore/CartStore.docc/ObservingCartsInProcess.md"), encoding: .utf8)
        let block = article.components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "\n```")[0]
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let compiled = source.components(separatedBy: "        // DocC block begins\n")[1]
            .components(separatedBy: "        // DocC block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(block == "import CartStore\nimport Dispatch\n\n" + unindented.trimmingCharacters(in: .newlines))
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Never called: it writes `carts.sqlite` into the working directory.
    static func docCExample() async throws {
        // DocC block begins
        final class CartBadge: CartObserver {
            func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
                print("now:", carts.map { "\($0.id) v\($0.version)" })
            }
            func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
                print("#\(event.seq) \(cart.id) is at version \(cart.version)")
            }
        }

        let store = try CartStore(path: "carts.sqlite")
        let badge = CartBadge()
        store.observers.add(badge, carts: .only(["alice"]), queue: DispatchQueue(label: "badge"))
        try await store.addItem(cartID: "alice", sku: "apple", quantity: 2, unitPriceCents: 50)
        // DocC block ends
    }

    /// Never called.
    static func example() async throws {
        // README block begins
        let store = try CartStore(path: "carts.sqlite")  // WAL, migrated, durability .full
        final class Badge: CartObserver {
            func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
                print("now:", carts.map { "\($0.id) v\($0.version)" })
            }
            func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
                print("#\(event.seq) \(cart.id) v\(cart.version): \(cart.itemCount) items")
            }
        }
        let badge = Badge()
        // Held weakly: release it and it is gone. Told alice's cart as it is, then each of its
        // changes once, in seq order — as an observer of a server's carts is (FanoutClient).
        store.observers.add(badge, carts: .only(["alice"]))
        let commit = try await store.addItem(cartID: "alice", sku: "apple", quantity: 2, unitPriceCents: 50)
        // commit.event.seq == 1, commit.cart.version == 1

        if case .events(let events, let latestSeq) = try await store.events(after: 0) {  // the log
            print(events.count, "events up to seq", latestSeq)
        }
        // README block ends
        #expect(commit.event.seq == 1 && commit.cart.version == 1)
    }
}

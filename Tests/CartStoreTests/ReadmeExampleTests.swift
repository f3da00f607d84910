import CartStore
import Foundation
import Testing

/// README "CartStore in a minute": the block between the markers is the README's Swift block
/// that imports CartStore (FanoutClientTests keeps the FanoutClient one), compiled with
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

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Never called.
    static func example() async throws {
        // README block begins
        let store = try CartStore(path: "carts.sqlite")  // WAL, migrated, durability .full
        final class Logger: CartStoreObserver {
            func cartStore(_ store: CartStore, didCommit event: CartEvent) {
                print(event.seq, event.cartID, event.kind)
            }
        }
        let logger = Logger()
        store.observers.add(logger)  // held weakly: release it and it is gone
        let commit = try await store.addItem(cartID: "alice", sku: "apple", quantity: 2, unitPriceCents: 50)
        // commit.event.seq == 1, commit.cart.version == 1; `logger` has already been told.

        if case .events(let events, let latestSeq) = try await store.events(after: 0) {  // the log
            print(events.count, "events up to seq", latestSeq)
        }
        // README block ends
        #expect(commit.event.seq == 1 && commit.cart.version == 1)
    }
}

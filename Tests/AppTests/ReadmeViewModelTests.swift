import CartStore
import FanoutClient
import Foundation
import Testing

/// README "Observing a server's carts from Swift": its view model (the block that begins
/// `@MainActor final class BasketModel`) is the one compiled below, in this Swift 6 target with
/// nothing added, and it works on a local store as the README says it does.
@Suite("README view model")
@MainActor
struct ReadmeViewModelTests {
    @Test func theREADMEsViewModelIsTheCompiledOneAndWritesToALocalStore() async throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: repository.appending(path: "README.md"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
            .filter { $0.hasPrefix("@MainActor final class BasketModel") }
        #expect(blocks.count == 1, "one view model block in the README, kept compiled here")
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let compiled = source.components(separatedBy: "        // README block begins\n")[1]
            .components(separatedBy: "        // README block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(blocks.first == unindented.trimmingCharacters(in: .newlines))

        let (skus, problem) = try await Self.readmeModelAddsAnApple()
        #expect(skus == ["apple"], "written through the store, told back")
        #expect(problem == nil)
    }

    /// The README's block, as written there, on a local store: one apple added through it.
    static func readmeModelAddsAnApple() async throws -> (skus: [String]?, problem: String?) {
        // README block begins
        @MainActor final class BasketModel: MainActorCartObserver {
            var cart: Cart?
            var problem: String?
            let store: any CartWriter
            init(_ store: any CartWriter) {
                self.store = store
                store.observers.add(self, carts: .only(["alice"]))
            }
            func cartSource(_ source: any CartSource, didLoad carts: [Cart]) { cart = carts.first }
            func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) { self.cart = cart }
            // The server could not resume (a pruned log, another database): the carts as they are now.
            func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) { cart = carts.first }
            // Writes not yet confirmed, shown on top of the server's cart.
            func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) { self.cart = cart }
            func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
                problem = error.description
            }
            func add(_ sku: String) async { _ = try? await store.addItem(sku, quantity: 1, unitPriceCents: 50, to: "alice") }
        }
        // BasketModel(try CartStore.inMemory()) in a test or preview, BasketModel(remoteStore) in the app.
        // README block ends
        let model = BasketModel(try CartStore.inMemory())
        await model.add("apple")
        // Told on the main actor, after the commit.
        _ = await until { model.cart != nil }
        return (model.cart?.items.map(\.sku), model.problem)
    }
}

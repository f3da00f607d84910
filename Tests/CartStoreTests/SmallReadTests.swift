import Foundation
import GRDB
import Testing

@testable import CartStore

/// The connections that run a store file's small reads on the caller's thread.
@Suite("Small reads")
struct SmallReadTests {
    /// A store file with one cart, and readers of its own beside the store's.
    private static func store(_ directory: TemporaryDirectory, limit: Int) async throws -> (CartStore, SmallReaders) {
        let store = try CartStore(path: directory.path("store.sqlite"))
        _ = try await store.addItem(cartID: "a", sku: "tea", quantity: 1, unitPriceCents: 300)
        let pool = try #require((store.backend as? SQLiteBackend)?.writer as? DatabasePool)
        return (store, SmallReaders(of: pool, limit: limit))
    }

    private static func quantity(_ db: Database) throws -> Int? {
        try Int.fetchOne(db, sql: "SELECT quantity FROM cart_items WHERE cart_id = 'a' AND sku = 'tea'")
    }

    @Test func eachReadSeesWhatWasCommittedBeforeIt() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let (store, readers) = try await Self.store(directory, limit: 1)
        defer { try? store.close() }
        #expect(try readers.read(Self.quantity) == 1)
        // The same connection again: its last read's transaction is over.
        _ = try await store.setQuantity(cartID: "a", sku: "tea", quantity: 5)
        #expect(try readers.read(Self.quantity) == 5)
        readers.close()
    }

    @Test func aReadThatFailsLeavesItsConnectionReadyForTheNext() async throws {
        struct Refused: Error {}
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let (store, readers) = try await Self.store(directory, limit: 1)
        defer { try? store.close() }
        #expect(throws: Refused.self) {
            try readers.read { db in
                _ = try Self.quantity(db)
                throw Refused()
            }
        }
        // Still inside the failed read's transaction, the connection would refuse to begin
        // another, or show the cart as it was.
        _ = try await store.setQuantity(cartID: "a", sku: "tea", quantity: 7)
        #expect(try readers.read(Self.quantity) == 7)
        readers.close()
    }

    @Test func aReadWhileEveryConnectionIsInUseIsNotWaitedFor() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let (store, readers) = try await Self.store(directory, limit: 1)
        defer { try? store.close() }
        let inner = try readers.read { _ in try readers.read(Self.quantity) }
        #expect(inner == .some(nil), "nothing to read it with: nil at once, for the caller to read elsewhere")
        readers.close()
        #expect(try readers.read(Self.quantity) == nil, "closed: nothing more is opened")
    }

    @Test func theStoreAnswersSmallReadsWhenItsConnectionsAreAllInUse() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"))
        defer { try? store.close() }
        _ = try await store.addItem(cartID: "a", sku: "tea", quantity: 2, unitPriceCents: 300)
        let backend = try #require(store.backend as? SQLiteBackend)
        let readers = try #require(backend.smallReaders)
        // Every reader held by threads of their own until the read below is answered.
        let holding = DispatchGroup()
        let release = DispatchSemaphore(value: 0)
        defer { for _ in 0..<readers.limit { release.signal() } }
        for _ in 0..<readers.limit {
            holding.enter()
            Thread.detachNewThread {
                _ = try? readers.read { _ in
                    holding.leave()
                    release.wait()
                }
            }
        }
        holding.wait()
        #expect(try readers.read(Self.quantity) == nil, "every connection is in use")
        let cart = try await store.cart("a")
        #expect(cart?.items.first?.quantity == 2)
    }

    @Test func theWholeStoreIsReadWhetherItHoldsFewCartsOrMany() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"))
        defer { try? store.close() }
        // Up to 16 carts the read runs on the caller's thread; from 17 on GRDB's reader queue.
        for count in 1...18 {
            _ = try await store.addItem(cartID: "c\(count)", sku: "tea", quantity: count, unitPriceCents: 300)
            let snapshot = try await store.snapshot()
            #expect(snapshot.carts.count == count)
            #expect(snapshot.carts.map(\.items[0].quantity).sorted() == Array(1...count))
            #expect(snapshot.seq == Int64(count))
        }
        let backend = try #require(store.backend as? SQLiteBackend)
        let readers = try #require(backend.smallReaders)
        #expect(try readers.read { db in try SQLiteBackend.hasMoreCarts(than: 16, db) } == true)
        #expect(try readers.read { db in try SQLiteBackend.hasMoreCarts(than: 18, db) } == false)
    }

    @Test func aReaderThatCannotBeOpenedLeavesTheReadToThePool() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let (store, readers) = try await Self.store(directory, limit: 1)
        defer { try? store.close() }
        // The file moved away under an open store: its pool's connections still read it, but
        // no connection can be opened at its path any more.
        try FileManager.default.moveItem(atPath: directory.path("store.sqlite"), toPath: directory.path("moved.sqlite"))
        #expect(try readers.read(Self.quantity) == nil, "nil at once, for the caller to read elsewhere")
        let cart = try await store.cart("a")
        #expect(cart?.items.first?.quantity == 1, "the store read it through its pool")
    }
}

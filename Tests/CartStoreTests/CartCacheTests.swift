import Foundation
import Testing

@testable import CartStore
@testable import CartStorePostgres

/// The carts a PostgreSQL server's batches plan on without reading their lines: what is kept
/// follows the log a version at a time, forgets what it cannot follow, and stays bounded.
@Suite("Cart cache")
struct CartCacheTests {
    static func event(_ seq: Int64, cart: String = "c", version: Int64, _ change: CartChange) -> CartEvent {
        CartEvent(seq: seq, cartID: cart, change: change, version: version, committedAt: Date(millisecondsSince1970: 0))
    }

    static func item(_ sku: String, _ quantity: Int = 1) -> CartItem {
        CartItem(sku: sku, quantity: quantity, unitPriceCents: 10)
    }

    static func entry(_ id: String, version: Int64, skus: [String], from seq: Int64 = 1) -> CartCache.Entry {
        var positions: [String: Int64] = [:]
        for (index, sku) in skus.enumerated() { positions[sku] = seq + Int64(index) }
        return CartCache.Entry(cart: Cart(id: id, version: version, items: skus.map { item($0) }), positions: LinePositions(positions))
    }

    /// A kept cart moved on by each delivered event of the next version ends as folding the
    /// log makes it, each line's position the seq that added it.
    @Test func aKeptCartFollowsItsEventsAsTheLogFoldsThem() throws {
        let cache = CartCache()
        cache.keep(["c": Self.entry("c", version: 2, skus: ["a", "b"])])
        let events = [
            Self.event(3, version: 3, .itemAdded(item: Self.item("x"), addedQuantity: 1)),
            Self.event(4, cart: "other", version: 1, .itemAdded(item: Self.item("o"), addedQuantity: 1)),
            Self.event(5, version: 4, .itemAdded(item: Self.item("a", 3), addedQuantity: 2)),
            Self.event(6, version: 5, .quantityChanged(sku: "b", quantity: 7)),
            Self.event(7, version: 6, .itemRemoved(sku: "x")),
            Self.event(8, version: 7, .itemAdded(item: Self.item("x"), addedQuantity: 1)),
        ]
        for event in events { cache.apply(event) }
        let kept = try #require(cache.entries(["c", "other"], latest: 8)["c"])
        var folded = Cart(id: "c", version: 2, items: [Self.item("a"), Self.item("b")])
        for event in events { folded.apply(event) }
        #expect(kept.cart == folded)
        #expect(kept.cart.items.map(\.sku) == ["a", "b", "x"])
        #expect(kept.positions.bySKU == ["a": 1, "b": 2, "x": 8], "a line added again is placed at its new seq")
        #expect(cache.entries(["other"], latest: 8).isEmpty, "a cart never kept is not made up from its events")

        cache.apply(Self.event(9, version: 8, .cartCleared))
        #expect(cache.entries(["c"], latest: 9)["c"] == CartCache.Entry(cart: Cart(id: "c", version: 8), positions: LinePositions()))
    }

    /// A version skipped (a change this cache never saw) forgets the cart rather than keep it
    /// wrong; an event already in a kept cart (its batch kept it first) changes nothing.
    @Test func aSkippedVersionForgetsTheCartAndAnOldOneChangesNothing() {
        let cache = CartCache()
        let kept = Self.entry("c", version: 3, skus: ["a"])
        cache.keep(["c": kept])
        cache.apply(Self.event(3, version: 3, .itemAdded(item: Self.item("a"), addedQuantity: 1)))
        #expect(cache.entries(["c"], latest: 3)["c"] == kept)
        cache.apply(Self.event(5, version: 5, .cartCleared))
        #expect(cache.entries(["c"], latest: 5).isEmpty)
    }

    /// A batch keeps what it left unless a later version of the cart is kept already (the
    /// follower delivered another server's next change first).
    @Test func aBatchDoesNotPutBackAnOlderVersion() {
        let cache = CartCache()
        cache.keep(["c": Self.entry("c", version: 5, skus: ["a", "b"])])
        cache.keep(["c": Self.entry("c", version: 4, skus: ["a"]), "d": Self.entry("d", version: 1, skus: [])])
        let kept = cache.entries(["c", "d"], latest: 10)
        #expect(kept["c"]?.cart.version == 5)
        #expect(kept["d"]?.cart.version == 1)
    }

    /// However many carts batches keep, the lines kept (a cart counting one more) stay within
    /// the bound; a cart larger than the bound alone is not kept.
    @Test func whatIsKeptStaysWithinItsBound() {
        let cache = CartCache(maxLines: 50)
        for index in 0..<100 {
            cache.keep(["c\(index)": Self.entry("c\(index)", version: 1, skus: (0..<(index % 7)).map { "s\($0)" })])
            #expect(cache.count.lines <= 50)
        }
        #expect(cache.count.carts > 0)
        let big = Self.entry("big", version: 1, skus: (0..<60).map { "s\($0)" })
        cache.keep(["big": big])
        #expect(cache.entries(["big"], latest: 1).isEmpty)
        #expect(cache.count.lines <= 50)
        cache.apply(Self.event(2, cart: "c99", version: 2, .itemAdded(item: Self.item("grow"), addedQuantity: 1)))
        #expect(cache.count.lines <= 50)
    }

    /// A log that went back (its database restored under the server) forgets everything: a
    /// version may name another state of the cart there.
    @Test func aLogThatWentBackForgetsEverything() {
        let cache = CartCache()
        cache.keep(["c": Self.entry("c", version: 3, skus: ["a"])])
        #expect(cache.entries(["c"], latest: 40).count == 1)
        #expect(cache.entries(["c"], latest: 12).isEmpty)
        #expect(cache.count.carts == 0)
    }
}

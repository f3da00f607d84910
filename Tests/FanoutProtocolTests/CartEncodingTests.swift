import FanoutProtocol
import Foundation
import Testing

/// A cart reads the same in every answer and in the snapshot: docs/PROTOCOL.md's shape.
@Suite("Cart encoding")
struct CartEncodingTests {
    static let cart = Cart(
        id: "alice", version: 3,
        items: [
            CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Green apple"),
            CartItem(sku: "pear", quantity: 1, unitPriceCents: 80),
        ])

    static func object(_ value: some Encodable) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: FanoutJSON.encoder().encode(value)) as? [String: Any])
    }

    @Test func aCartCarriesItsTotalsAndLineTotals() throws {
        let cart = try Self.object(Self.cart)
        #expect(Set(cart.keys) == ["id", "version", "items", "totalCents", "itemCount"])
        #expect(cart["totalCents"] as? Int == 180)
        #expect(cart["itemCount"] as? Int == 3)
        let items = try #require(cart["items"] as? [[String: Any]])
        #expect(Set(items[0].keys) == ["sku", "quantity", "unitPriceCents", "name", "lineTotalCents"])
        #expect(items.map { $0["lineTotalCents"] as? Int } == [100, 80])
        #expect(items[1]["name"] == nil, "no name, no key")
    }

    @Test func theSnapshotSendsTheSameCartShape() throws {
        let snapshot = try Self.object(ServerMessage.snapshot(carts: [Self.cart], seq: 9, reason: .initial))
        let carts = try #require(snapshot["carts"] as? [[String: Any]])
        #expect(carts.first?["totalCents"] as? Int == 180)
        #expect(carts.first?["itemCount"] as? Int == 3)
        #expect((carts.first?["items"] as? [[String: Any]])?.first?["lineTotalCents"] as? Int == 100)
        let http = try Self.object(CartsResponse(carts: [Self.cart], seq: 9))
        let httpCart = try #require((http["carts"] as? [[String: Any]])?.first)
        #expect(Set(httpCart.keys) == Set(try #require(carts.first).keys), "one Cart shape everywhere")
    }

    @Test func decodingRecomputesTheDerivedFieldsAndRefusesContradictions() throws {
        let decoder = FanoutJSON.decoder()
        // Without them (event-log rows written before lines carried them): computed.
        let bare = try decoder.decode(
            Cart.self, from: Data(#"{"id":"a","version":1,"items":[{"sku":"s","quantity":2,"unitPriceCents":5}]}"#.utf8))
        #expect(bare.totalCents == 10)
        #expect(try decoder.decode(Cart.self, from: try FanoutJSON.encoder().encode(Self.cart)) == Self.cart)
        #expect(throws: DecodingError.self) {
            try decoder.decode(Cart.self, from: Data(#"{"id":"a","version":1,"items":[],"totalCents":5,"itemCount":0}"#.utf8))
        }
        #expect(throws: DecodingError.self) {
            try decoder.decode(CartItem.self, from: Data(#"{"sku":"s","quantity":2,"unitPriceCents":5,"lineTotalCents":11}"#.utf8))
        }
    }
}

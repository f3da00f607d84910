import FanoutProtocol
import Foundation
import Testing

/// The HTTP bodies and answers that fanout-server encodes and fanout-client decodes.
@Suite("HTTP messages")
struct HTTPMessageTests {
    @Test func errorBodiesCarryTheirExtraNumbers() throws {
        let error = ErrorResponse(code: "history_too_old", message: "pruned", details: ["oldestRetainedSeq": 4, "latestSeq": 9])
        let text = String(decoding: try FanoutJSON.encoder().encode(error), as: UTF8.self)
        #expect(text == #"{"error":{"code":"history_too_old","latestSeq":9,"message":"pruned","oldestRetainedSeq":4}}"#)
        #expect(try FanoutJSON.decoder().decode(ErrorResponse.self, from: Data(text.utf8)) == error)
        // A newer server's non-numeric extras are skipped, not refused.
        let newer = #"{"error":{"code":"x","message":"m","hint":"later","retryAfter":2}}"#
        #expect(try FanoutJSON.decoder().decode(ErrorResponse.self, from: Data(newer.utf8)).error.details == ["retryAfter": 2])
    }

    @Test func answersRoundTrip() throws {
        let cart = Cart(id: "a", version: 2, items: [CartItem(sku: "s", quantity: 3, unitPriceCents: 7)])
        let event = CartEvent(
            seq: 2, cartID: "a", change: .quantityChanged(sku: "s", quantity: 3), version: 2,
            committedAt: Date(timeIntervalSince1970: 1_763_700_000))
        try Self.roundTrip(MutationResponse(cart: cart, seq: 2, deliveredTo: 5))
        try Self.roundTrip(CartsResponse(carts: [cart], seq: 2))
        try Self.roundTrip(CartResponse(cart: cart, seq: 2))
        try Self.roundTrip(EventsPage(events: [event], latestSeq: 2, nextSince: 2))
        try Self.roundTrip(HealthResponse())
        try Self.roundTrip(AddItemRequest(sku: "s", quantity: 1, unitPriceCents: 0, name: "S"))
        try Self.roundTrip(SetQuantityRequest(quantity: 0))
        #expect(
            String(decoding: try FanoutJSON.encoder().encode(AddItemRequest(sku: "s", quantity: 1, unitPriceCents: 2)), as: UTF8.self)
                == #"{"quantity":1,"sku":"s","unitPriceCents":2}"#)
    }

    /// The read answers say the database's identity as `databaseId`; an older server's answer,
    /// without it, still reads (as nil).
    @Test func readAnswersCarryTheDatabaseIdentityAndReadWithoutIt() throws {
        let cart = Cart(id: "a", version: 1, items: [CartItem(sku: "s", quantity: 1, unitPriceCents: 7)])
        let id = "0c6e2f4a-9b1d-4e57-a3c8-5f2d7e9b1a60"
        try Self.roundTrip(CartsResponse(carts: [cart], seq: 1, databaseID: id))
        try Self.roundTrip(CartResponse(cart: cart, seq: 1, databaseID: id))
        try Self.roundTrip(EventsPage(events: [], latestSeq: 1, nextSince: 1, databaseID: id))
        let text = String(decoding: try FanoutJSON.encoder().encode(CartsResponse(carts: [], seq: 1, databaseID: id)), as: UTF8.self)
        #expect(text == #"{"carts":[],"databaseId":"0c6e2f4a-9b1d-4e57-a3c8-5f2d7e9b1a60","seq":1}"#)

        let decoder = FanoutJSON.decoder()
        #expect(try decoder.decode(CartsResponse.self, from: Data(#"{"carts":[],"seq":3}"#.utf8)) == CartsResponse(carts: [], seq: 3))
        let older = try decoder.decode(CartResponse.self, from: Data(try FanoutJSON.encoder().encode(CartResponse(cart: cart, seq: 3))))
        #expect(older.databaseID == nil)
        let page = try decoder.decode(EventsPage.self, from: Data(#"{"events":[],"latestSeq":3,"nextSince":3}"#.utf8))
        #expect(page.databaseID == nil)
    }

    static func roundTrip<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let decoded = try FanoutJSON.decoder().decode(T.self, from: try FanoutJSON.encoder().encode(value))
        #expect(decoded == value, sourceLocation: sourceLocation)
    }
}

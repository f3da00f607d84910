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

    static func roundTrip<T: Codable & Equatable>(_ value: T, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let decoded = try FanoutJSON.decoder().decode(T.self, from: try FanoutJSON.encoder().encode(value))
        #expect(decoded == value, sourceLocation: sourceLocation)
    }
}

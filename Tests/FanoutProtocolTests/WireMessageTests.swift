import FanoutProtocol
import Foundation
import Testing

@Suite("Wire messages")
struct WireMessageTests {
    static let event = CartEvent(
        seq: 7, cartID: "alice",
        change: .itemAdded(item: CartItem(sku: "apple", quantity: 3, unitPriceCents: 50, name: "Apple"), addedQuantity: 1),
        version: 4, committedAt: Date(timeIntervalSince1970: 1_763_700_000.123))

    static func json(_ message: ServerMessage) throws -> [String: Any] {
        let data = try FanoutJSON.encoder().encode(message)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func serverMessagesAreFlatObjectsWithAType() throws {
        let event = try Self.json(.event(Self.event))
        #expect(event["type"] as? String == "event")
        #expect(event["seq"] as? Int == 7)
        #expect(event["cartId"] as? String == "alice")
        #expect(event["kind"] as? String == "itemAdded")
        #expect(event["committedAt"] as? Int == 1_763_700_000_123)
        let welcome = try Self.json(.welcome(.init(subscriberID: "s1", heartbeatInterval: 5, leaseTTL: 15, latestSeq: 9)))
        #expect(welcome["type"] as? String == "welcome")
        #expect(welcome["subscriberId"] as? String == "s1")
        #expect(welcome["leaseTtl"] as? Double == 15)
        #expect(welcome["databaseId"] == nil, "absent when not said")
        let identified = try Self.json(
            .welcome(.init(subscriberID: "s1", heartbeatInterval: 5, leaseTTL: 15, latestSeq: 9, databaseID: "0c6e2f4a")))
        #expect(identified["databaseId"] as? String == "0c6e2f4a")
    }

    @Test(arguments: [
        ServerMessage.event(WireMessageTests.event),
        .welcome(.init(subscriberID: "s1", heartbeatInterval: 0.5, leaseTTL: 1.5, latestSeq: 0)),
        .welcome(.init(subscriberID: "s1", heartbeatInterval: 0.5, leaseTTL: 1.5, latestSeq: 0, databaseID: "0c6e2f4a")),
        .snapshot(
            carts: [Cart(id: "alice", version: 2, items: [CartItem(sku: "a", quantity: 1, unitPriceCents: 0)])], seq: 12,
            reason: .sinceTooOld),
        .snapshot(carts: [Cart(id: "bob", version: 1)], seq: 12, reason: .initial, more: true),
        .heartbeat(latestSeq: 99),
        .error(code: "bad_message", message: "expected a JSON object"),
    ])
    func serverMessagesRoundTrip(message: ServerMessage) throws {
        let data = try FanoutJSON.encoder().encode(message)
        #expect(try FanoutJSON.decoder().decode(ServerMessage.self, from: data) == message)
    }

    @Test func clientMessagesDecodeFromWhatPeopleType() throws {
        let decoder = FanoutJSON.decoder()
        #expect(try decoder.decode(ClientMessage.self, from: Data(#"{"type":"heartbeat"}"#.utf8)) == .heartbeat)
        #expect(try decoder.decode(ClientMessage.self, from: Data(#"{"type":"subscribe"}"#.utf8)) == .subscribe(carts: nil, since: nil))
        #expect(
            try decoder.decode(ClientMessage.self, from: Data(#"{"type":"subscribe","carts":["a"],"since":4}"#.utf8))
                == .subscribe(carts: ["a"], since: 4))
        #expect(throws: DecodingError.self) {
            try decoder.decode(ClientMessage.self, from: Data(#"{"type":"dance"}"#.utf8))
        }
    }

    /// A `since` that is not a whole number from 0 to 2^63−1 is the subscription's mistake, not
    /// an unreadable message: `invalid_since`, as an event stream's `since` is refused, saying
    /// what it got. (One past Int64 used to read as "invalid JSON".)
    @Test(arguments: [
        ("9223372036854775808", "(got 9223372036854775808)"),
        ("99999999999999999999999999999999999999999999", "(got a number too long to show)"),
        ("1e400", "(got a number too long to show)"),
        ("0.5", "(got 0.5)"),
        (#""12""#, #"(got the string "12")"#),
        ("true", "(got true)"),
        ("[1]", "(got a value that is not a number)"),
    ])
    func aSubscribeWithASinceOutsideInt64IsInvalidSince(since: String, got: String) throws {
        let text = #"{"type":"subscribe","since":\#(since)}"#
        let error = #expect(throws: FanoutError.self) {
            try FanoutJSON.decoder().decode(ClientMessage.self, from: Data(text.utf8))
        }
        #expect(error?.code == .invalidSince, "\(text)")
        #expect(error?.message == "since must be a whole number from 0 to 9223372036854775807 \(got)", "\(text)")
    }

    @Test func aSinceThatIsAWholeNumberReadsAsOne() throws {
        let cases: [(String, Int64?)] = [("0", 0), ("9223372036854775807", .max), ("12.0", 12), ("1e2", 100), ("-1", -1), ("null", nil)]
        for (text, since) in cases {
            let message = try FanoutJSON.decoder().decode(ClientMessage.self, from: Data(#"{"type":"subscribe","since":\#(text)}"#.utf8))
            // A negative one is the endpoint's to refuse (`invalid_since`, as for a stream).
            #expect(message == .subscribe(carts: nil, since: since), "\(text)")
        }
    }

    @Test func identifierRule() {
        #expect(CartLimits.isValidIdentifier("a.B_c-9"))
        #expect(!CartLimits.isValidIdentifier(""))
        #expect(!CartLimits.isValidIdentifier("é"))
        #expect(!CartLimits.isValidIdentifier(String(repeating: "a", count: 65)))
    }
}

@Suite("Event JSON")
struct EventJSONTests {
    static let events: [CartEvent] = [
        CartEvent(
            seq: 1, cartID: "alice",
            change: .itemAdded(
                item: CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Green / \"Granny\" \\ é 🍏\n\t\u{1}"), addedQuantity: 2),
            version: 1, committedAt: Date(timeIntervalSince1970: 1_763_879_560.123)),
        CartEvent(
            seq: 9_007_199_254_740_993, cartID: "b.c_d-1", change: .quantityChanged(sku: "x", quantity: 7), version: 42,
            committedAt: Date(timeIntervalSince1970: 0)),
        CartEvent(seq: 3, cartID: "c", change: .itemRemoved(sku: "x"), version: 3, committedAt: Date(timeIntervalSince1970: 1_700_000_000)),
        CartEvent(seq: 4, cartID: "c", change: .cartCleared, version: 4, committedAt: Date(timeIntervalSince1970: 1_700_000_000.5)),
    ]

    @Test(arguments: events)
    func theEventMessageIsByteForByteWhatTheEncoderWrites(event: CartEvent) throws {
        let encoded = try FanoutJSON.encoder().encode(ServerMessage.event(event))
        #expect(EventJSON.message(event) == Array(encoded))
        // And around a change encoded beforehand, as the store hands it over.
        let stored = CartEvent(
            seq: event.seq, cartID: event.cartID, change: event.change, encodedChange: EventJSON.change(event.change),
            version: event.version, committedAt: event.committedAt)
        #expect(EventJSON.message(stored) == Array(encoded))
        #expect(stored == event, "the encoded change is not part of the event's value")
    }

    /// The HTTP read answers, written by hand on every read: what the encoder writes, byte for
    /// byte (events with and without their change encoded beforehand, carts of every shape).
    @Test func theReadAnswersAreByteForByteWhatTheEncoderWrites() throws {
        let encoder = FanoutJSON.encoder()
        let stored = Self.events.map {
            CartEvent(
                seq: $0.seq, cartID: $0.cartID, change: $0.change, encodedChange: EventJSON.change($0.change),
                version: $0.version, committedAt: $0.committedAt)
        }
        // With and without the database's identity (an odd one too: it is only a string).
        let identities = [nil, "0c6e2f4a-9b1d-4e57-a3c8-5f2d7e9b1a60", "\"odd\" \u{1}"]
        for events in [[], Self.events, stored, Array(stored.prefix(1))] {
            for databaseID in identities {
                let page = EventsPage(events: events, latestSeq: 9_007_199_254_740_993, nextSince: 12, databaseID: databaseID)
                #expect(page.json() == Array(try encoder.encode(page)), "\(String(decoding: page.json(), as: UTF8.self))")
            }
        }
        let carts = JSONBytesTests.carts
        for cart in carts {
            for databaseID in identities {
                let answer = CartResponse(cart: cart, seq: 77, databaseID: databaseID)
                #expect(answer.json() == Array(try encoder.encode(answer)), "\(String(decoding: answer.json(), as: UTF8.self))")
            }
        }
        for list in [[], carts, Array(carts.prefix(1))] {
            for databaseID in identities {
                let answer = CartsResponse(carts: list, seq: 0, databaseID: databaseID)
                #expect(answer.json() == Array(try encoder.encode(answer)), "\(String(decoding: answer.json(), as: UTF8.self))")
            }
        }
        for health in [HealthResponse(), HealthResponse(status: "cannot write: \"disk\" full")] {
            #expect(health.json() == Array(try encoder.encode(health)))
        }
    }

    @Test func changingTheChangeForgetsItsEncoding() throws {
        var event = CartEvent(
            seq: 1, cartID: "c", change: .cartCleared, encodedChange: #"{"kind":"cartCleared"}"#, version: 1,
            committedAt: Date(timeIntervalSince1970: 0))
        event.change = .itemRemoved(sku: "x")
        #expect(EventJSON.message(event) == Array(try FanoutJSON.encoder().encode(ServerMessage.event(event))))
    }
}

@Suite("JSON bytes")
struct JSONBytesTests {
    /// Every control character, quote, backslash, slash, DEL, non-ASCII and an emoji.
    static let awkward = String(decoding: (0..<0x20).map { UInt8($0) }, as: UTF8.self) + #""\/ \#u{7F} é ü ÿ 中 \#u{2028} 🍏 end"#

    static let carts: [Cart] = [
        Cart(id: "empty", version: 0, items: []),
        Cart(
            id: "alice", version: 3,
            items: [
                CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Green / \"Granny\""),
                CartItem(sku: "pear", quantity: 10_000, unitPriceCents: 1_000_000_000),
            ]),
        Cart(
            id: "b.c_d-1", version: 9_007_199_254_740_993,
            items: [
                CartItem(sku: awkward, quantity: 1, unitPriceCents: 0, name: awkward)
            ]),
    ]

    @Test(arguments: carts)
    func aMutationAnswerIsByteForByteWhatTheEncoderWrites(cart: Cart) throws {
        let answer = MutationResponse(cart: cart, seq: 12_345, deliveredTo: 1_000)
        let json = answer.json()
        #expect(json == Array(try FanoutJSON.encoder().encode(answer)), "\(String(decoding: json, as: UTF8.self))")
        #expect(try FanoutJSON.decoder().decode(MutationResponse.self, from: Data(json)) == answer)
    }

    @Test(arguments: [
        CartChange.itemAdded(item: CartItem(sku: awkward, quantity: 3, unitPriceCents: 7, name: awkward), addedQuantity: 1),
        .itemAdded(item: CartItem(sku: "s", quantity: 1, unitPriceCents: 1), addedQuantity: 1),
        .quantityChanged(sku: awkward, quantity: 0),
        .itemRemoved(sku: awkward),
        .cartCleared,
    ])
    func aChangeIsByteForByteWhatTheEncoderWrites(change: CartChange) throws {
        #expect(Array(EventJSON.change(change).utf8) == Array(try FanoutJSON.encoder().encode(change)))
    }
}

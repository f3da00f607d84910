import FanoutProtocol
import Foundation
import Testing

/// The log's changes are read back without `JSONDecoder` when they are in the form the store
/// writes; whatever that reader accepts must decode to what `JSONDecoder` gives, and anything
/// it does not know is left to `JSONDecoder`.
@Suite("Reading stored changes")
struct CanonicalJSONTests {
    static let changes: [CartChange] = [
        .itemAdded(item: CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Green apple"), addedQuantity: 1),
        .itemAdded(item: CartItem(sku: "s-1", quantity: 10_000, unitPriceCents: 1_000_000_000), addedQuantity: 10_000),
        .itemAdded(item: CartItem(sku: "thé", quantity: 1, unitPriceCents: 0, name: "Thé vert 🍵"), addedQuantity: 1),
        .quantityChanged(sku: "pear", quantity: 7),
        .itemRemoved(sku: "pear"),
        .cartCleared,
    ]

    static func decoded(_ json: String) -> CartChange? {
        try? JSONDecoder().decode(CartChange.self, from: Data(json.utf8))
    }

    @Test func everyKindOfChangeReadsBackAsWritten() {
        for change in Self.changes {
            let json = EventJSON.change(change)
            #expect(CartChange(canonicalJSON: json) == change, "\(json)")
            #expect(Self.decoded(json) == change, "\(json)")
        }
    }

    @Test func aStringTheStoreEscapedIsLeftToTheDecoder() throws {
        let change = CartChange.itemAdded(
            item: CartItem(sku: "a\"b", quantity: 1, unitPriceCents: 5, name: "line\\one\ntwo"), addedQuantity: 1)
        let json = EventJSON.change(change)
        #expect(json.contains("\\"))
        #expect(CartChange(canonicalJSON: json) == nil)
        #expect(Self.decoded(json) == change)
    }

    /// JSON another writer could have stored: equal for `JSONDecoder`, not in the store's form.
    @Test func anyOtherFormIsLeftToTheDecoder() {
        let others = [
            #"{"kind":"itemRemoved", "sku":"pear"}"#,  // a space
            #"{"sku":"pear","kind":"itemRemoved"}"#,  // another key order
            #"{"kind":"quantityChanged","quantity":007,"sku":"pear"}"#,  // leading zeros
            #"{"kind":"quantityChanged","quantity":-0,"sku":"pear"}"#,
            #"{"kind":"quantityChanged","quantity":7.0,"sku":"pear"}"#,
            #"{"addedQuantity":1,"item":{"quantity":2,"sku":"a","unitPriceCents":3},"kind":"itemAdded"}"#,  // no line total
            #"{"kind":"cartCleared"} "#,
        ]
        for json in others {
            #expect(CartChange(canonicalJSON: json) == nil, "\(json)")
        }
        #expect(Self.decoded(others[0]) == .itemRemoved(sku: "pear"), "the decoder still reads them")
        #expect(Self.decoded(others[5]) != nil)
    }

    /// A line total that disagrees with its line is refused by the decoder; the reader must not
    /// accept it either.
    @Test func aWrongLineTotalIsNotAccepted() {
        let json = #"{"addedQuantity":1,"item":{"lineTotalCents":99,"quantity":2,"sku":"a","unitPriceCents":3},"kind":"itemAdded"}"#
        #expect(CartChange(canonicalJSON: json) == nil)
        #expect(Self.decoded(json) == nil)
    }

    /// Cut anywhere, a change is not read as a shorter one.
    @Test func aTruncatedChangeIsNeverRead() {
        for change in Self.changes {
            let bytes = Array(EventJSON.change(change).utf8)
            for end in 0..<bytes.count {
                let cut = String(decoding: bytes[..<end], as: UTF8.self)
                #expect(CartChange(canonicalJSON: cut) == nil, "\(cut)")
            }
        }
    }
}

/// JSON written straight into bytes, for the shapes the server writes on every mutation and
/// every read (a change, an event, a cart, the HTTP answers).
///
/// `JSONEncoder` builds a tree of boxed values, sorts keys and walks it again for every call,
/// which was a tenth of a mutation's CPU; these shapes are fixed, so their keys are written
/// in sorted order by hand. What comes out is byte for byte what `FanoutJSON.encoder()` writes
/// for the same value (tests compare the two), so a client cannot tell which one spoke.
public struct JSONBytes {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// Bytes already JSON (a key with its quotes and colon, punctuation, an encoded value).
    public mutating func raw(_ json: StaticString) {
        json.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    public mutating func raw(_ json: some Sequence<UInt8>) {
        bytes.append(contentsOf: json)
    }

    public mutating func int(_ value: some BinaryInteger) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A JSON string, escaped as `JSONEncoder` escapes it with `.withoutEscapingSlashes`:
    /// quote, backslash and control characters; everything else as its UTF-8.
    public mutating func string(_ string: String) {
        bytes.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { utf8 in
            var clean = 0  // start of the bytes not yet copied
            for index in utf8.indices {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean..<index]))
                escape(byte)
                clean = index + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[clean...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func escape(_ byte: UInt8) {
        switch byte {
        case UInt8(ascii: "\""): raw(#"\""#)
        case UInt8(ascii: "\\"): raw(#"\\"#)
        case 0x0A: raw(#"\n"#)
        case 0x0D: raw(#"\r"#)
        case 0x09: raw(#"\t"#)
        case 0x08: raw(#"\b"#)
        case 0x0C: raw(#"\f"#)
        default:
            let hex: StaticString = "0123456789abcdef"
            raw(#"\u00"#)
            hex.withUTF8Buffer { hex in
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            }
        }
    }

    // MARK: The product's shapes, keys in sorted order

    /// `{"lineTotalCents",…,"name"?,"quantity","sku","unitPriceCents"}`
    public mutating func item(_ item: CartItem) {
        raw(#"{"lineTotalCents":"#)
        int(item.lineTotalCents)
        if let name = item.name {
            raw(#","name":"#)
            string(name)
        }
        raw(#","quantity":"#)
        int(item.quantity)
        raw(#","sku":"#)
        string(item.sku)
        raw(#","unitPriceCents":"#)
        int(item.unitPriceCents)
        raw("}")
    }

    /// `[…]`: each element written by `element`, comma-separated.
    public mutating func array<Element>(_ elements: [Element], _ element: (inout JSONBytes, Element) -> Void) {
        raw("[")
        for (index, value) in elements.enumerated() {
            if index > 0 { raw(",") }
            element(&self, value)
        }
        raw("]")
    }

    /// `{"id","itemCount","items","totalCents","version"}`
    public mutating func cart(_ cart: Cart) {
        raw(#"{"id":"#)
        string(cart.id)
        raw(#","itemCount":"#)
        int(cart.itemCount)
        raw(#","items":"#)
        array(cart.items) { $0.item($1) }
        raw(#","totalCents":"#)
        int(cart.totalCents)
        raw(#","version":"#)
        int(cart.version)
        raw("}")
    }

    /// A change as the log stores it, e.g. `{"addedQuantity":2,"item":{…},"kind":"itemAdded"}`.
    public mutating func change(_ change: CartChange) {
        switch change {
        case .itemAdded(let line, let addedQuantity):
            raw(#"{"addedQuantity":"#)
            int(addedQuantity)
            raw(#","item":"#)
            item(line)
            raw(#","kind":"itemAdded"}"#)
        case .quantityChanged(let sku, let quantity):
            raw(#"{"kind":"quantityChanged","quantity":"#)
            int(quantity)
            raw(#","sku":"#)
            string(sku)
            raw("}")
        case .itemRemoved(let sku):
            raw(#"{"kind":"itemRemoved","sku":"#)
            string(sku)
            raw("}")
        case .cartCleared:
            raw(#"{"kind":"cartCleared"}"#)
        }
    }
}

extension MutationResponse {
    /// `{"cart","deliveredTo","seq"}`: this answer as `FanoutJSON.encoder()` writes it.
    public func json() -> [UInt8] {
        JSONBytes.cartAnswer(cart, deliveredTo: deliveredTo, seq: seq)
    }
}

extension CartResponse {
    /// `{"cart","databaseId"?,"seq"}`: this answer as `FanoutJSON.encoder()` writes it.
    public func json() -> [UInt8] {
        JSONBytes.cartAnswer(cart, databaseID: databaseID, deliveredTo: nil, seq: seq)
    }
}

extension JSONBytes {
    /// `{"cart",["databaseId",]["deliveredTo",]"seq"}`: a mutation's answer, or a read of one cart.
    static func cartAnswer(_ cart: Cart, databaseID: String? = nil, deliveredTo: Int?, seq: Int64) -> [UInt8] {
        var json = JSONBytes(capacity: 128 + cart.items.count * 96)
        json.raw(#"{"cart":"#)
        json.cart(cart)
        json.databaseID(databaseID)
        if let deliveredTo {
            json.raw(#","deliveredTo":"#)
            json.int(deliveredTo)
        }
        json.raw(#","seq":"#)
        json.int(seq)
        json.raw("}")
        return json.bytes
    }

    /// `,"databaseId":"…"` when there is one: a read answer's identity of its database, after
    /// a key that sorts before it.
    mutating func databaseID(_ id: String?) {
        guard let id else { return }
        raw(#","databaseId":"#)
        string(id)
    }
}

extension CartsResponse {
    /// `{"carts","databaseId"?,"seq"}`: this answer as `FanoutJSON.encoder()` writes it.
    public func json() -> [UInt8] {
        var json = JSONBytes(capacity: 80 + carts.reduce(0) { $0 + 96 + $1.items.count * 96 })
        json.raw(#"{"carts":"#)
        json.array(carts) { $0.cart($1) }
        json.databaseID(databaseID)
        json.raw(#","seq":"#)
        json.int(seq)
        json.raw("}")
        return json.bytes
    }
}

extension EventsPage {
    /// `{"databaseId"?,"events","latestSeq","nextSince"}`: this page as `FanoutJSON.encoder()`
    /// writes it.
    public func json() -> [UInt8] {
        var json = JSONBytes(capacity: 112 + events.count * 256)
        if let databaseID {
            json.raw(#"{"databaseId":"#)
            json.string(databaseID)
            json.raw(#","events":"#)
        } else {
            json.raw(#"{"events":"#)
        }
        json.array(events) { $0.event($1, asMessage: false) }
        json.raw(#","latestSeq":"#)
        json.int(latestSeq)
        json.raw(#","nextSince":"#)
        json.int(nextSince)
        json.raw("}")
        return json.bytes
    }
}

extension HealthResponse {
    /// `{"status"}`: this answer as `FanoutJSON.encoder()` writes it.
    public func json() -> [UInt8] {
        var json = JSONBytes(capacity: 24)
        json.raw(#"{"status":"#)
        json.string(status)
        json.raw("}")
        return json.bytes
    }
}

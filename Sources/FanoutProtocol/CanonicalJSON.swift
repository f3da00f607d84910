/// Reading back a change as the store wrote it, without a general JSON decoder.
///
/// The store writes each change once (`EventJSON.change`, by `JSONBytes`) and reads it back
/// wherever the log is read: on every server, for every event another server commits.
/// `JSONDecoder` took about half of a following server's work per event. A change in the form
/// `JSONBytes` writes is read here field by field, and kept only if writing the value read
/// gives back the same bytes: so whatever this accepts, decoding it with `JSONDecoder` gives
/// the same value. Anything else (an escaped string, keys in another order, spaces) is nil,
/// and the caller decodes it as before.
extension CartChange {
    package init?(canonicalJSON json: String) {
        var json = json
        let read: CartChange? = json.withUTF8 { bytes in
            var reader = CanonicalReader(bytes: bytes)
            guard let change = reader.change(), reader.atEnd else { return nil }
            var written = JSONBytes(capacity: bytes.count)
            written.change(change)
            return written.bytes.elementsEqual(bytes) ? change : nil
        }
        guard let read else { return nil }
        self = read
    }
}

/// Reads the fields of `JSONBytes.change` in the order it writes them; nil at the first byte
/// that differs from that form.
private struct CanonicalReader {
    let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    var atEnd: Bool { index == bytes.count }

    mutating func change() -> CartChange? {
        if take(#"{"addedQuantity":"#) {
            guard let added = int(), take(#","item":"#), let item = item(), take(#","kind":"itemAdded"}"#) else { return nil }
            return .itemAdded(item: item, addedQuantity: added)
        }
        if take(#"{"kind":"quantityChanged","quantity":"#) {
            guard let quantity = int(), take(#","sku":"#), let sku = string(), take("}") else { return nil }
            return .quantityChanged(sku: sku, quantity: quantity)
        }
        if take(#"{"kind":"itemRemoved","sku":"#) {
            guard let sku = string(), take("}") else { return nil }
            return .itemRemoved(sku: sku)
        }
        return take(#"{"kind":"cartCleared"}"#) ? .cartCleared : nil
    }

    /// `{"lineTotalCents",["name",]"quantity","sku","unitPriceCents"}` (the line total is
    /// checked by writing the change again).
    private mutating func item() -> CartItem? {
        guard take(#"{"lineTotalCents":"#), int() != nil else { return nil }
        var name: String?
        if take(#","name":"#) {
            guard let read = string() else { return nil }
            name = read
        }
        guard take(#","quantity":"#), let quantity = int(), take(#","sku":"#), let sku = string(),
            take(#","unitPriceCents":"#), let price = int(), take("}")
        else { return nil }
        return CartItem(sku: sku, quantity: quantity, unitPriceCents: price, name: name)
    }

    private mutating func take(_ literal: StaticString) -> Bool {
        literal.withUTF8Buffer { expected in
            guard bytes.count - index >= expected.count,
                UnsafeBufferPointer(rebasing: bytes[index..<index + expected.count]).elementsEqual(expected)
            else { return false }
            index += expected.count
            return true
        }
    }

    /// An optional minus and 1 to 18 digits (no overflow is possible).
    private mutating func int() -> Int? {
        var negative = false
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        var value = 0
        let start = index
        while index < bytes.count, index - start < 18, case let digit = bytes[index], digit >= UInt8(ascii: "0"),
            digit <= UInt8(ascii: "9")
        {
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
            index += 1
        }
        return index > start ? (negative ? -value : value) : nil
    }

    /// A string without escapes (one with a backslash is left to the general decoder).
    private mutating func string() -> String? {
        guard take("\"") else { return nil }
        let start = index
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                defer { index += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            case UInt8(ascii: "\\"):
                return nil
            default:
                index += 1
            }
        }
        return nil
    }
}

import Foundation

/// Where a committed event becomes JSON.
///
/// The store encodes a change once, when it commits it (`change`): those bytes are the log
/// row's `change` column, and they travel with the event (`CartEvent.encodedChange`) to every
/// message that carries it. `message` wraps them in the event message that every transport
/// sends, without encoding the change again; the result is byte for byte what encoding
/// `ServerMessage.event` with `FanoutJSON.encoder()` gives (sorted keys).
public enum EventJSON {
    private static let encoder = FanoutJSON.encoder()

    /// A change as JSON, as the log stores it.
    public static func change(_ change: CartChange) throws -> String {
        String(decoding: try encoder.encode(change), as: UTF8.self)
    }

    /// The event message `{"cartId",…,"type":"event",…}`, around the event's encoded change.
    public static func message(_ event: CartEvent) throws -> [UInt8] {
        let change = try event.encodedChange ?? Self.change(event.change)
        var json: [UInt8] = []
        json.reserveCapacity(change.utf8.count + event.cartID.utf8.count + 128)
        json.append(contentsOf: #"{"cartId":"#.utf8)
        appendString(event.cartID, to: &json)
        json.append(contentsOf: #","change":"#.utf8)
        json.append(contentsOf: change.utf8)
        json.append(contentsOf: #","committedAt":\#(milliseconds(event.committedAt)),"kind":""#.utf8)
        json.append(contentsOf: event.kind.rawValue.utf8)
        json.append(contentsOf: #"","seq":\#(event.seq),"type":"event","version":\#(event.version)}"#.utf8)
        return json
    }

    /// Milliseconds since 1970 as `FanoutJSON` writes dates: a whole number for the store's
    /// dates, which are whole milliseconds.
    private static func milliseconds(_ date: Date) -> String {
        let value = date.timeIntervalSince1970 * 1000
        if value == value.rounded(), abs(value) < 9e15 { return String(Int64(value)) }
        return String(decoding: (try? encoder.encode(date)) ?? Data("0".utf8), as: UTF8.self)
    }

    /// A JSON string, escaped as JSONEncoder escapes it (slashes left alone).
    private static func appendString(_ string: String, to json: inout [UInt8]) {
        json.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): json.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): json.append(contentsOf: #"\\"#.utf8)
            case 0x0A: json.append(contentsOf: #"\n"#.utf8)
            case 0x0D: json.append(contentsOf: #"\r"#.utf8)
            case 0x09: json.append(contentsOf: #"\t"#.utf8)
            case 0x08: json.append(contentsOf: #"\b"#.utf8)
            case 0x0C: json.append(contentsOf: #"\f"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                json.append(contentsOf: #"\u00"#.utf8)
                json.append(hex[Int(byte >> 4)])
                json.append(hex[Int(byte & 0xF)])
            default: json.append(byte)
            }
        }
        json.append(UInt8(ascii: "\""))
    }
}

import Foundation

/// Where a committed event becomes JSON.
///
/// The store encodes a change once, when it commits it (`change`): those bytes are the log
/// row's `change` column, and they travel with the event (`CartEvent.encodedChange`) to every
/// message that carries it. `message` wraps them in the event message that every transport
/// sends, without encoding the change again. Both are written by `JSONBytes`, byte for byte
/// what encoding the same values with `FanoutJSON.encoder()` gives (sorted keys).
public enum EventJSON {
    /// A change as JSON, as the log stores it.
    public static func change(_ change: CartChange) -> String {
        var json = JSONBytes(capacity: 160)
        json.change(change)
        return String(decoding: json.bytes, as: UTF8.self)
    }

    /// The event message `{"cartId",…,"type":"event",…}`, around the event's encoded change.
    public static func message(_ event: CartEvent) -> [UInt8] {
        let change = event.encodedChange ?? Self.change(event.change)
        var json = JSONBytes(capacity: change.utf8.count + event.cartID.utf8.count + 128)
        json.raw(#"{"cartId":"#)
        json.string(event.cartID)
        json.raw(#","change":"#)
        json.raw(change.utf8)
        json.raw(#","committedAt":"#)
        json.raw(milliseconds(event.committedAt).utf8)
        json.raw(#","kind":""#)
        json.raw(event.kind.rawValue.utf8)
        json.raw(#"","seq":"#)
        json.int(event.seq)
        json.raw(#","type":"event","version":"#)
        json.int(event.version)
        json.raw("}")
        return json.bytes
    }

    private static let encoder = FanoutJSON.encoder()

    /// Milliseconds since 1970 as `FanoutJSON` writes dates: a whole number for the store's
    /// dates, which are whole milliseconds.
    private static func milliseconds(_ date: Date) -> String {
        let value = date.timeIntervalSince1970 * 1000
        if value == value.rounded(), abs(value) < 9e15 { return String(Int64(value)) }
        return String(decoding: (try? encoder.encode(date)) ?? Data("0".utf8), as: UTF8.self)
    }
}

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
        var json = JSONBytes(
            capacity: (event.encodedChange?.utf8.count ?? 96) + event.cartID.utf8.count + (event.idempotencyKey?.utf8.count ?? 0) + 148)
        json.event(event, asMessage: true)
        return json.bytes
    }

    /// Milliseconds since 1970 as `FanoutJSON` writes dates: a whole number for the store's
    /// dates, which are whole milliseconds.
    static func milliseconds(_ date: Date) -> String {
        let value = date.timeIntervalSince1970 * 1000
        if value == value.rounded(), abs(value) < 9e15 { return String(Int64(value)) }
        return String(decoding: (try? encoder.encode(date)) ?? Data("0".utf8), as: UTF8.self)
    }

    private static let encoder = FanoutJSON.encoder()
}

extension JSONBytes {
    /// `{"cartId","change","committedAt",["idempotencyKey",]"kind","seq",["type":"event",]"version"}`: an event as
    /// the log pages carry it, or (`asMessage`) the event message every transport sends. The
    /// change is the event's encoded one, not encoded again.
    public mutating func event(_ event: CartEvent, asMessage: Bool) {
        raw(#"{"cartId":"#)
        string(event.cartID)
        raw(#","change":"#)
        if let change = event.encodedChange {
            raw(change.utf8)
        } else {
            self.change(event.change)
        }
        raw(#","committedAt":"#)
        raw(EventJSON.milliseconds(event.committedAt).utf8)
        if let key = event.idempotencyKey {
            raw(#","idempotencyKey":"#)
            string(key)
        }
        raw(#","kind":""#)
        raw(event.kind.rawValue.utf8)
        raw(#"","seq":"#)
        int(event.seq)
        raw(asMessage ? #","type":"event","version":"# : #","version":"#)
        int(event.version)
        raw("}")
    }
}

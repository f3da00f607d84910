import Foundation

extension CartEvent {
    /// The columns of an event's log row, in the order `StoredRow` holds them: every engine's
    /// read of events selects these (a new field of the event is a column here, a field there).
    package static let storedColumns = "seq, cart_id, change, cart_version, committed_at, idempotency_key"

    /// An event's log row as the engines read it (`storedColumns`): seq, cart, the change's
    /// JSON, the cart's version after it, when it was committed (ms since 1970), its key.
    package typealias StoredRow = (Int64, String, String, Int64, Int64, String?)

    /// The event of a log row.
    package static func stored(_ row: StoredRow) throws -> CartEvent {
        try stored(seq: row.0, cartID: row.1, change: row.2, version: row.3, committedAt: row.4, idempotencyKey: row.5)
    }

    /// An event as a log row stores it, in any engine: the change as its JSON (read back
    /// without a general decoder when it is in the form the store writes).
    package static func stored(
        seq: Int64, cartID: String, change: String, version: Int64, committedAt: Int64, idempotencyKey: String? = nil
    ) throws -> CartEvent {
        CartEvent(
            seq: seq,
            cartID: cartID,
            change: try CartChange(canonicalJSON: change) ?? storedChangeDecoder.decode(CartChange.self, from: Data(change.utf8)),
            encodedChange: change,
            version: version,
            committedAt: Date(millisecondsSince1970: committedAt),
            idempotencyKey: idempotencyKey)
    }
}

private let storedChangeDecoder = JSONDecoder()

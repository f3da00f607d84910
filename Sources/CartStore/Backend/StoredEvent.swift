import Foundation

extension CartEvent {
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

/// The checks of `CartLimits`, as fanout's errors: the store refuses with them, the server
/// refuses a subscription's cart ids with them, and the client checks its arguments with them
/// before asking.
extension CartLimits {
    /// What a cart id or sku may be, in words, for every message that says so.
    public static let identifierRule = "1–\(maxIdentifierLength) characters of A-Z a-z 0-9 . _ -"

    public static func checkCartID(_ id: String) throws(FanoutError) {
        guard isValidIdentifier(id) else {
            throw FanoutError(.invalidCartID, "a cart id is \(identifierRule) (got \(quoted(id)))")
        }
    }

    public static func checkSKU(_ sku: String) throws(FanoutError) {
        guard isValidIdentifier(sku) else {
            throw FanoutError(.invalidSKU, "a sku is \(identifierRule) (got \(quoted(sku)))")
        }
    }

    public static func checkQuantity(_ quantity: Int, allowZero: Bool = false) throws(FanoutError) {
        guard quantityRange.contains(quantity) || (allowZero && quantity == 0) else {
            let low = allowZero ? 0 : quantityRange.lowerBound
            throw FanoutError(.invalidQuantity, "quantity must be \(low)…\(quantityRange.upperBound) (got \(quantity))")
        }
    }

    public static func checkPrice(_ cents: Int) throws(FanoutError) {
        guard unitPriceCentsRange.contains(cents) else {
            throw FanoutError(.invalidPrice, "unitPriceCents must be 0…\(unitPriceCentsRange.upperBound) (got \(cents))")
        }
    }

    public static func checkName(_ name: String?) throws(FanoutError) {
        guard let name else { return }
        // Unicode scalars, as SQLite's length() counts them in the table's CHECK (and JSON Schema's
        // maxLength): counted as grapheme clusters, "é" written e + U+0301 passed here and failed there.
        guard name.unicodeScalars.count <= maxNameLength else {
            throw FanoutError(.invalidName, "name must be at most \(maxNameLength) characters (got \(name.unicodeScalars.count))")
        }
    }

    public static func checkIdempotencyKey(_ key: String) throws(FanoutError) {
        guard isValidIdempotencyKey(key) else {
            throw FanoutError(
                .invalidIdempotencyKey,
                "an Idempotency-Key is 1–\(maxIdempotencyKeyLength) characters of printable ASCII without spaces (got \(key.utf8.count) bytes)"
            )
        }
    }

    /// Quotes user input for an error message without letting a huge value flood it.
    public static func quoted(_ value: String) -> String {
        let shown = value.count > 80 ? String(value.prefix(80)) + "…" : value
        return "\"\(shown)\""
    }
}

import FanoutProtocol

/// The store's checks of `CartLimits`, as typed errors.
extension CartLimits {
    static func checkCartID(_ id: String) throws {
        guard isValidIdentifier(id) else {
            throw CartStoreError(.invalidCartID, "cart id must be 1–64 characters of A-Z a-z 0-9 . _ - (got \(quoted(id)))")
        }
    }

    static func checkSKU(_ sku: String) throws {
        guard isValidIdentifier(sku) else {
            throw CartStoreError(.invalidSKU, "sku must be 1–64 characters of A-Z a-z 0-9 . _ - (got \(quoted(sku)))")
        }
    }

    static func checkQuantity(_ quantity: Int, allowZero: Bool = false) throws {
        guard quantityRange.contains(quantity) || (allowZero && quantity == 0) else {
            let low = allowZero ? 0 : quantityRange.lowerBound
            throw CartStoreError(.invalidQuantity, "quantity must be \(low)…\(quantityRange.upperBound) (got \(quantity))")
        }
    }

    static func checkPrice(_ cents: Int) throws {
        guard unitPriceCentsRange.contains(cents) else {
            throw CartStoreError(.invalidPrice, "unitPriceCents must be 0…\(unitPriceCentsRange.upperBound) (got \(cents))")
        }
    }

    static func checkName(_ name: String?) throws {
        guard let name else { return }
        // Unicode scalars, as SQLite's length() counts them in the table's CHECK (and JSON Schema's
        // maxLength): counted as grapheme clusters, "é" written e + U+0301 passed here and failed there.
        guard name.unicodeScalars.count <= maxNameLength else {
            throw CartStoreError(.invalidName, "name must be at most \(maxNameLength) characters (got \(name.unicodeScalars.count))")
        }
    }

    /// Quotes user input for an error message without letting a huge value flood it.
    static func quoted(_ value: String) -> String {
        let shown = value.count > 80 ? String(value.prefix(80)) + "…" : value
        return "\"\(shown)\""
    }
}

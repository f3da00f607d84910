/// The input rules of the store. Anything outside them is refused with a `CartStoreError`.
public enum CartLimits {
    public static let maxIdentifierLength = 64
    public static let quantityRange = 1...10_000
    public static let unitPriceCentsRange = 0...1_000_000_000
    public static let maxNameLength = 200
    /// Keeps a cart's total far inside `Int64` (1 000 × 10 000 × 10⁹ = 10¹⁶).
    public static let maxItemsPerCart = 1_000

    /// Cart ids and skus: 1–64 characters of `A-Za-z0-9._-`.
    public static func isValidIdentifier(_ value: String) -> Bool {
        let bytes = value.utf8
        guard (1...maxIdentifierLength).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default:
                false
            }
        }
    }

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
        guard name.count <= maxNameLength else {
            throw CartStoreError(.invalidName, "name must be at most \(maxNameLength) characters (got \(name.count))")
        }
    }

    /// Quotes user input for an error message without letting a huge value flood it.
    static func quoted(_ value: String) -> String {
        let shown = value.count > 80 ? String(value.prefix(80)) + "…" : value
        return "\"\(shown)\""
    }
}

/// The input rules for carts, shared by the store, the server and the client.
///
/// The store refuses anything outside them with a `CartStoreError`; clients can check first.
public enum CartLimits {
    public static let maxIdentifierLength = 64
    public static let quantityRange = 1...10_000
    public static let unitPriceCentsRange = 0...1_000_000_000
    public static let maxNameLength = 200
    /// Keeps a cart's total far inside `Int64` (1 000 × 10 000 × 10⁹ = 10¹⁶).
    public static let maxItemsPerCart = 1_000
    /// An `Idempotency-Key` is 1–255 characters of printable ASCII other than space (`!`…`~`),
    /// as Stripe's keys are.
    public static let maxIdempotencyKeyLength = 255

    /// Whether `key` is an idempotency key: 1–255 bytes, each `!`…`~` (0x21–0x7E).
    public static func isValidIdempotencyKey(_ key: String) -> Bool {
        let bytes = key.utf8
        return (1...maxIdempotencyKeyLength).contains(bytes.count) && bytes.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Cart ids, skus and presence member keys: 1–`maxLength` characters of `A-Za-z0-9._-`,
    /// other than `.` and `..` (which a URL's path cannot carry as a segment). The one rule of
    /// what names a thing.
    public static func isValidIdentifier(_ value: String, maxLength: Int = maxIdentifierLength) -> Bool {
        let bytes = value.utf8
        guard (1...maxLength).contains(bytes.count), value != ".", value != ".." else { return false }
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
}

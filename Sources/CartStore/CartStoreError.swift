/// An error of the cart store: a stable machine-readable `code` and a message for people.
///
/// Every invalid input is refused with one of these before anything is written, so a failed
/// call never produces an event.
public struct CartStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: String, Sendable, Hashable, CaseIterable {
        case invalidCartID = "invalid_cart_id"
        case invalidSKU = "invalid_sku"
        case invalidQuantity = "invalid_quantity"
        case invalidPrice = "invalid_price"
        case invalidName = "invalid_name"
        case invalidLimit = "invalid_limit"
        /// Adding would take a line past `CartLimits.maxQuantity`.
        case quantityOverflow = "quantity_overflow"
        case tooManyItems = "too_many_items"
        case cartNotFound = "cart_not_found"
        case itemNotFound = "item_not_found"
        /// `expectedVersion` did not match the cart's version.
        case versionConflict = "version_conflict"
        /// A `since` beyond the newest seq: the caller saw a different log (another database).
        case invalidSince = "invalid_since"
        case sinceAhead = "since_ahead"
        /// The events after `since` were pruned: take a snapshot instead.
        case historyTooOld = "history_too_old"
        /// The database was migrated by a newer version of this software.
        case schemaTooNew = "schema_too_new"
        /// Too many changes are already waiting to be written: retry shortly.
        case overloaded = "overloaded"
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

import GRDB

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
        /// The disk is full: nothing was written. Writes resume once space is freed.
        case storageFull = "storage_full"
        /// The database cannot be written (read-only, I/O error, gone): nothing was written.
        case storeUnavailable = "store_unavailable"
        /// Another process (or another store in this one) has the database open.
        case databaseInUse = "database_in_use"
        /// The file is not a database of this program's: it was left untouched.
        case notAFanoutDatabase = "not_a_fanout_database"
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

extension CartStoreError {
    /// A SQLite failure to store something, as the store's own error: a full disk, or a
    /// database that cannot be written. Other errors are returned as they are.
    static func storage(_ error: any Error) -> any Error {
        guard let error = error as? DatabaseError else { return error }
        switch error.resultCode {
        case .SQLITE_FULL:
            return CartStoreError(.storageFull, "the disk is full; nothing was written (writes resume once space is freed)")
        case .SQLITE_READONLY, .SQLITE_IOERR, .SQLITE_CANTOPEN, .SQLITE_NOTADB, .SQLITE_CORRUPT, .SQLITE_PERM:
            return CartStoreError(.storeUnavailable, "the database cannot be written (\(error.message ?? "\(error.resultCode)")); nothing was written")
        default:
            return error
        }
    }
}

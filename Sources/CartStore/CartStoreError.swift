import FanoutProtocol
import GRDB

/// An error of the cart store: a code from fanout's one list (`FanoutErrorCode`) and a message
/// for people.
///
/// Every invalid input is refused with one of these before anything is written, so a failed
/// call never produces an event.
public typealias CartStoreError = FanoutError

extension FanoutError {
    /// A SQLite failure to store something, as the store's own error: a full disk, or a
    /// database that cannot be written. Other errors are returned as they are.
    static func storage(_ error: any Error) -> any Error {
        guard let error = error as? DatabaseError else { return error }
        switch error.resultCode {
        case .SQLITE_FULL:
            return CartStoreError(.storageFull, "the disk is full; nothing was written (writes resume once space is freed)")
        case .SQLITE_READONLY, .SQLITE_IOERR, .SQLITE_CANTOPEN, .SQLITE_NOTADB, .SQLITE_CORRUPT, .SQLITE_PERM:
            return CartStoreError(
                .storeUnavailable, "the database cannot be written (\(error.message ?? "\(error.resultCode)")); nothing was written")
        default:
            return error
        }
    }
}

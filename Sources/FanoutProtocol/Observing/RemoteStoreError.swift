// Defined in FanoutProtocol so that CartStore and FanoutClient share it (`CartObserver`).
import Foundation

/// Why a request to a fanout-server, or a connection to it, failed; also why a server refused
/// carts to an observer (`CartObserver.cartSource(_:didRefuse:because:)`).
public enum RemoteStoreError: Error, Sendable, CustomStringConvertible {
    /// The server answered with one of its errors (`FanoutErrorCode`), with the HTTP status.
    /// A code a newer server added decodes as `code == nil` with its text in `rawCode`;
    /// `details` are the error's whole-number fields (`currentVersion`, `latestSeq`, …).
    case refused(status: Int, code: FanoutErrorCode?, rawCode: String, message: String, details: [String: Int64] = [:])
    /// The server could not be reached, or the connection broke.
    case unreachable(String)
    /// Something answered that is not a fanout-server (or broke its protocol).
    case unexpectedAnswer(String)
    /// The input breaks the rules the server would refuse it for (`CartLimits`): not sent.
    case invalid(FanoutError)
    /// A `RemoteCartStore` already holds this many writes the server has not confirmed: the
    /// write was not taken (nothing is dropped to make room).
    case tooManyPendingWrites(Int)
    /// A `RemoteCartStore`'s write made at this date waited longer than its
    /// `pendingWriteLifetime` for the server: it was rolled back and is not sent again. (If an
    /// earlier sending was committed and its answer lost, its event still arrives.)
    case pendingWriteExpired(Date)
    /// The `RemoteCartStore` was closed (`close()`): it takes no more writes.
    case storeClosed

    /// The server's error code, when it answered with one.
    public var code: FanoutErrorCode? {
        switch self {
        case .refused(_, let code, _, _, _): code
        case .invalid(let error): error.code
        default: nil
        }
    }

    /// For `version_conflict`: the version the cart is at on the server, to read the cart at
    /// (or retry the change with as `expectedVersion`).
    public var currentVersion: Int64? {
        guard case .refused(_, .versionConflict?, _, _, let details) = self else { return nil }
        return details["currentVersion"]
    }

    /// The server refused who we are or what we asked for (401 or 403).
    public var isRefusal: Bool {
        if case .refused(let status, _, _, _, _) = self { return status == 401 || status == 403 }
        return false
    }

    /// The server refused with a code that retrying as is cannot change (credentials, a bad
    /// value): a subscription pauses instead of retrying at once.
    public var isPermanent: Bool {
        if case .invalid = self { return true }
        return code.map { !$0.isRetryable } ?? false
    }

    public var description: String {
        switch self {
        case .refused(let status, _, let rawCode, let message, _): "server refused (\(status) \(rawCode)): \(message)"
        case .unreachable(let why): why
        case .unexpectedAnswer(let why): why
        case .invalid(let error): error.message
        case .pendingWriteExpired(let madeAt):
            "a write made at \(madeAt) waited too long for the server and was rolled back (RemoteCartStore's pendingWriteLifetime)"
        case .tooManyPendingWrites(let limit):
            "\(limit) writes are waiting for the server already: wait for some to be confirmed (RemoteCartStore.maxPendingWrites)"
        case .storeClosed: "the store is closed: it takes no more writes"
        }
    }
}

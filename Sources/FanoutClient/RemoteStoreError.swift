import FanoutProtocol

import struct Foundation.Data

/// Why a request to a fanout-server, or a connection to it, failed.
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
        }
    }

    /// The error of an answer with a non-2xx `status` and `body`.
    static func answer(status: Int, body: [UInt8]) -> RemoteStoreError {
        guard let answer = try? FanoutJSON.decoder().decode(ErrorResponse.self, from: Data(body)) else {
            return .unexpectedAnswer("server answered HTTP \(status)")
        }
        return .refused(
            status: status, code: FanoutErrorCode(rawValue: answer.error.code), rawCode: answer.error.code,
            message: answer.error.message, details: answer.error.details)
    }
}

/// Where the client's token comes from: none, a fixed value, or a closure asked before each
/// connection and request (so that an expiring token can be refreshed).
public struct Credentials: Sendable {
    let token: @Sendable () async throws -> String?

    /// No token: for a server open on loopback.
    public static let none = Credentials { nil }

    /// The same token every time.
    public static func token(_ value: String) -> Credentials { Credentials { value } }

    /// A token fetched before each connection and request.
    public static func provider(_ fetch: @escaping @Sendable () async throws -> String?) -> Credentials {
        Credentials(token: fetch)
    }
}

import FanoutProtocol

import struct Foundation.Data

extension RemoteStoreError {
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

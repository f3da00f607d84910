import FanoutProtocol
import Foundation

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

    /// A token fetched before each connection and request, and, for a signed token (a JWT
    /// with `exp`), again before it expires: an open subscription is handed the fresh one in
    /// band (a WebSocket's `refresh` message; a new event stream that takes over), so a token's
    /// end never drops the connection. A provider that throws is reported as
    /// `ConnectionProblem.credentialsUnavailable`, and asked again.
    public static func provider(_ fetch: @escaping @Sendable () async throws -> String?) -> Credentials {
        Credentials(token: fetch)
    }

    /// The token for a connection: the provider's failure as `credentialsUnavailable`.
    func tokenForConnection() async throws -> String? {
        do {
            return try await token()
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw ConnectionProblem.credentialsUnavailable("\(error)")
        }
    }

    /// When a signed token (a JWT) expires, read from its `exp` claim: not verified (the
    /// server does that), only to know when to refresh it. Nil for a token that is not a JWT
    /// or has no `exp` (the operator's token).
    static func expiry(of token: String) -> Date? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var payload = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        payload += String(repeating: "=", count: (4 - payload.count % 4) % 4)
        guard let data = Data(base64Encoded: payload),
            let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let exp = (claims["exp"] as? NSNumber)?.doubleValue
        else { return nil }
        return Date(timeIntervalSince1970: exp)
    }

    /// How long to wait before refreshing a token that expires at `expiry`: until a quarter of
    /// its remaining life is left (at least half a second, at most a minute before its end).
    static func refreshDelay(until expiry: Date, now: Date = Date()) -> Duration {
        let remaining = expiry.timeIntervalSince(now)
        let lead = min(60, max(0.5, remaining * 0.25))
        return .milliseconds(Int(max(0, remaining - lead) * 1_000))
    }

    /// A token other than `current`, from the provider, before `expiry`: asked until it has one
    /// (a provider whose cache has not turned over yet gives the same token again), at most
    /// every second; nil if the current token expires first, or the provider keeps failing.
    func fresher(than current: String, expiring expiry: Date) async throws -> String? {
        while Date() < expiry {
            if let fresh = try? await token(), fresh != current { return fresh }
            try Task.checkCancellation()
            let remaining = expiry.timeIntervalSinceNow
            try await Task.sleep(for: .milliseconds(Int(max(0.05, min(1, remaining / 2)) * 1_000)))
        }
        return nil
    }
}

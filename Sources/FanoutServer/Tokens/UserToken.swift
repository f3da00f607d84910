import CartStore
import FanoutProtocol
import Foundation
import JWTKit

/// The claims of a signed token, as `fanout-server` reads (and, for `fanout-server token`,
/// writes) them: `sub` and `exp` required, `nbf` and `iat` checked when present, `aud`,
/// `carts` (cart ids, or `"*"` for all) and `scope` (`read`, `write`, space-separated).
///
/// Decoding never fails on a claim of the wrong type: it notes which one, and `verify(using:)`
/// refuses the token saying so, so that every refusal names its cause.
struct UserToken: JWTPayload, Equatable {
    /// How far a clock may be ahead of the signer's: `nbf` and `iat` are checked with it.
    static let leeway: TimeInterval = 30

    var sub: SubjectClaim?
    var exp: ExpirationClaim?
    var nbf: NotBeforeClaim?
    var iat: IssuedAtClaim?
    var aud: AudienceClaim?
    var carts: [String]?
    var scope: String?
    /// Claims present but not of their type, by name.
    private(set) var malformedClaims: [String] = []

    /// The claims; `malformedClaims` is not one, and is not encoded.
    private enum CodingKeys: String, CodingKey {
        case sub, exp, nbf, iat, aud, carts, scope
    }

    init(subject: String, carts: [String], scope: String, expiresAt: Date, issuedAt: Date = Date(), audience: [String] = []) {
        sub = SubjectClaim(value: subject)
        exp = ExpirationClaim(value: expiresAt)
        iat = IssuedAtClaim(value: issuedAt)
        aud = audience.isEmpty ? nil : AudienceClaim(value: audience)
        self.carts = carts
        self.scope = scope
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        var malformed: [String] = []
        func claim<T: Decodable>(_ key: CodingKeys) -> T? {
            do {
                return try container.decodeIfPresent(T.self, forKey: key)
            } catch {
                malformed.append(key.rawValue)
                return nil
            }
        }
        sub = claim(.sub)
        exp = claim(.exp)
        nbf = claim(.nbf)
        iat = claim(.iat)
        aud = claim(.aud)
        carts = claim(.carts)
        scope = claim(.scope)
        malformedClaims = malformed
    }

    /// The claims' own rules, after the signature: jwt-kit calls it.
    func verify(using algorithm: some JWTAlgorithm) async throws {
        try check(now: Date())
    }

    /// Throws `invalid_token` with the reason when the claims do not make a valid token at `now`.
    func check(now: Date) throws(FanoutError) {
        if let claim = malformedClaims.first {
            throw Self.refusal(
                claim == "carts"
                    ? "the token's carts claim must be an array of cart ids" : "the token's \(claim) claim has the wrong type")
        }
        guard let sub, !sub.value.isEmpty else { throw Self.refusal("the token has no sub") }
        if let problem = Self.problem(withSubject: sub.value) { throw Self.refusal("the token's sub \(problem)") }
        guard let exp else { throw Self.refusal("the token has no exp") }
        do {
            try exp.verifyNotExpired(currentDate: now)
        } catch {
            throw Self.refusal("the token has expired")
        }
        if let nbf {
            do {
                try nbf.verifyNotBefore(currentDate: now.addingTimeInterval(Self.leeway))
            } catch {
                throw Self.refusal("the token is not valid yet (nbf)")
            }
        }
        if let iat, iat.value > now.addingTimeInterval(Self.leeway) {
            throw Self.refusal("the token was issued in the future (iat)")
        }
        for cart in carts ?? [] where cart != "*" {
            do {
                try CartLimits.checkCartID(cart)
            } catch {
                throw Self.refusal("the token's carts claim names an invalid cart id")
            }
        }
    }

    /// What the token lets its holder do, once verified. A missing `carts` or `scope` grants
    /// nothing of it.
    var grant: Grant {
        let scopes = Set((scope ?? "").split(separator: " ").map(String.init))
        let carts = carts ?? []
        return Grant(
            subject: sub?.value,
            carts: carts.contains("*") ? .all : .only(Set(carts)),
            mayRead: scopes.contains("read"),
            mayWrite: scopes.contains("write"),
            expiresAt: exp?.value)
    }

    /// The most bytes (UTF-8) of a `sub`: it is stored with what its user holds (presence
    /// members, idempotency keys), on every engine.
    static let maxSubjectBytes = 256

    /// Why `subject` cannot name a user, or nil when it can: longer than `maxSubjectBytes`, or
    /// with a control character (U+0000–U+001F, U+007F–U+009F), which no engine stores alike
    /// (PostgreSQL refuses a NUL in text) and no log or page shows as it is.
    static func problem(withSubject subject: String) -> String? {
        if subject.utf8.count > maxSubjectBytes { return "is longer than \(maxSubjectBytes) bytes" }
        if subject.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "contains a control character"
        }
        return nil
    }

    static func refusal(_ message: String) -> FanoutError {
        FanoutError(.invalidToken, message)
    }
}

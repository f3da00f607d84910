import FanoutProtocol
import Foundation
import JWTKit

/// The keys `fanout-server` verifies signed tokens with (`--jwt-secret`, `--jwt-key`), and the
/// audience it requires (`--jwt-audience`). jwt-kit checks the signatures and the time claims.
///
/// The algorithm is never the token's choice: each key accepts one algorithm, known from the key
/// itself (HS256 for the secret; RS256, ES256 or EdDSA for a PEM public key; a JWKS key's `alg`,
/// or its type's), and a token is verified only by a key whose `kid` and algorithm are the ones
/// its header names. So `alg: none`, an HS256 token signed with a public key, a `kid` no key
/// has, are all refused before any signature is checked.
struct TokenKeys: Sendable {
    /// One key, or a JWKS: tokens with this header `kid` (nil: none) and `alg` go to `keys`.
    private struct Verifier: Sendable {
        let kid: String?
        let algorithm: String
        let keys: JWTKeyCollection
    }

    /// Longer tokens are refused unread: a real one is a few hundred bytes.
    static let maxTokenLength = 8 * 1_024

    private let verifiers: [Verifier]
    let audience: String?

    /// Keys from a shared secret and/or a key file's text (a PEM public key, or a JWKS).
    /// Throws `TokenKeys.Unusable` for a key file that is neither.
    init(secret: String?, keyFile: String?, audience: String?) async throws {
        var verifiers: [Verifier] = []
        if let secret {
            verifiers.append(Verifier(kid: nil, algorithm: "HS256", keys: await Self.hmac(secret)))
        }
        if let keyFile {
            if keyFile.trimmingCharacters(in: .whitespacesAndNewlines).hasPrefix("{") {
                verifiers += try await Self.jwks(keyFile)
            } else {
                verifiers.append(try await Self.publicKey(pem: keyFile))
            }
        }
        self.verifiers = verifiers
        self.audience = audience
    }

    /// What a signed token lets its holder do; throws `invalid_token` with the reason when it is
    /// not one this server accepts. The message never quotes the token.
    func grant(for token: String) async throws(FanoutError) -> Grant {
        guard token.utf8.count <= Self.maxTokenLength else {
            throw UserToken.refusal("the token is longer than \(Self.maxTokenLength) bytes")
        }
        guard let header = Self.header(of: token) else { throw UserToken.refusal("the token is not a JWT") }
        let algorithm = header.alg ?? "none"
        guard let verifier = verifiers.first(where: { $0.kid == header.kid && $0.algorithm == algorithm }) else {
            if let kid = header.kid, !verifiers.contains(where: { $0.kid == kid }) {
                throw UserToken.refusal("the token's key id (kid) is not one of this server's keys")
            }
            throw UserToken.refusal("the token's algorithm is not one this server accepts for that key")
        }
        let payload: UserToken
        do {
            payload = try await verifier.keys.verify(token, as: UserToken.self)
        } catch let error as FanoutError {
            throw error
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw UserToken.refusal("the token's signature does not match")
        } catch {
            throw UserToken.refusal("the token is malformed")
        }
        if let audience {
            guard payload.aud?.value.contains(audience) == true else {
                throw UserToken.refusal("the token is not for this audience (aud)")
            }
        }
        return payload.grant
    }

    /// Signs `token` with the shared secret, as HS256: what `fanout-server token` prints.
    static func sign(_ token: UserToken, secret: String) async throws -> String {
        try await hmac(secret).sign(token)
    }

    /// The shortest HS256 secret RFC 7518 §3.2 allows, in bytes: as long as the hash.
    static let minSecretLength = 32

    /// What the server and `token` say about a secret shorter than `minSecretLength`: it is
    /// used (other programs sign with it), but it is weak. Nil for a long enough one. Never
    /// quotes the secret.
    static func weakness(of secret: String) -> String? {
        guard secret.utf8.count < minSecretLength else { return nil }
        return
            "--jwt-secret is \(secret.utf8.count) bytes, under the \(minSecretLength) HS256 asks for: tokens signed with it are easier to forge (openssl rand -hex 32 makes a good one)"
    }

    /// A key that cannot be used: a key file that is neither a PEM public key nor a JWKS.
    struct Unusable: Error, CustomStringConvertible {
        let description: String
    }

    // MARK: Keys

    /// HMAC pads a key shorter than its block (64 bytes for SHA-256) with zero bytes (RFC 2104),
    /// so a short secret and the same secret zero-padded to 32 bytes sign alike: the padding
    /// lets jwt-kit, which wants 32 bytes, verify what other libraries sign with a short one.
    private static func hmac(_ secret: String) async -> JWTKeyCollection {
        var key = Array(secret.utf8)
        if key.count < minSecretLength { key += repeatElement(0, count: minSecretLength - key.count) }
        return await JWTKeyCollection().add(hmac: HMACKey(from: key), digestAlgorithm: .sha256)
    }

    private static func publicKey(pem: String) async throws -> Verifier {
        let keys = JWTKeyCollection()
        if let key = try? Insecure.RSA.PublicKey(pem: pem) {
            await keys.add(rsa: key, digestAlgorithm: .sha256)
            return Verifier(kid: nil, algorithm: "RS256", keys: keys)
        }
        if let key = try? ES256PublicKey(pem: pem) {
            await keys.add(ecdsa: key)
            return Verifier(kid: nil, algorithm: "ES256", keys: keys)
        }
        if let key = try? EdDSA.PublicKey(pem: pem) {
            await keys.add(eddsa: key)
            return Verifier(kid: nil, algorithm: "EdDSA", keys: keys)
        }
        throw Unusable(description: "--jwt-key: not a PEM public key (RSA, P-256 or Ed25519) nor a JWKS")
    }

    /// A JWKS: every key with its `kid`, each accepting its `alg`, or RS256, ES256 or EdDSA by
    /// its type when it names none.
    private static func jwks(_ json: String) async throws -> [Verifier] {
        struct Entry: Decodable {
            let kid: String?
            let kty: String
            let alg: String?
            let crv: String?
        }
        struct Set: Decodable { let keys: [Entry] }
        let keys = JWTKeyCollection()
        let entries: [Entry]
        do {
            entries = try JSONDecoder().decode(Set.self, from: Data(json.utf8)).keys
            try await keys.add(jwksJSON: json)
        } catch {
            throw Unusable(description: "--jwt-key: not a JWKS of public keys, each with its kid")
        }
        return try entries.map { entry in
            guard let kid = entry.kid else { throw Unusable(description: "--jwt-key: every key of a JWKS needs a kid") }
            let byType: String? =
                switch (entry.kty, entry.crv) {
                case ("RSA", _): "RS256"
                case ("EC", "P-256"): "ES256"
                case ("EC", "P-384"): "ES384"
                case ("EC", "P-521"): "ES512"
                case ("OKP", _): "EdDSA"
                default: nil
                }
            guard let algorithm = entry.alg ?? byType else {
                throw Unusable(description: "--jwt-key: the JWKS key \(kid) has no usable type")
            }
            return Verifier(kid: kid, algorithm: algorithm, keys: keys)
        }
    }

    // MARK: Header

    /// The `alg` and `kid` a token's header names, read before anything is verified to pick the
    /// key; nil when the token is not three base64url parts with a JSON header.
    private static func header(of token: String) -> (alg: String?, kid: String?)? {
        struct Fields: Decodable {
            let alg: String?
            let kid: String?
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let data = base64URLDecoded(parts[0]),
            let fields = try? JSONDecoder().decode(Fields.self, from: data)
        else { return nil }
        return (fields.alg, fields.kid)
    }

    private static func base64URLDecoded(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}

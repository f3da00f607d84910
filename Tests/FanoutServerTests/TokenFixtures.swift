import Foundation
import JWTKit

@testable import FanoutServer

/// Tokens for the tests: the server's own HS256 ones, tokens signed with RSA, P-256 and Ed25519
/// keys, and forged ones, each made as the thing a client or an attacker would send.
enum Tokens {
    /// The server's `--jwt-secret` in these tests (HS256 needs 32 bytes or more).
    static let secret = "a test secret of thirty-two bytes or more"

    /// A token as `fanout-server token` mints it.
    static func hs256(
        _ subject: String, carts: [String], scope: String = "read write", expiresIn seconds: TimeInterval = 3_600,
        audience: [String] = [], secret: String = secret
    ) async throws -> String {
        try await TokenKeys.sign(
            UserToken(subject: subject, carts: carts, scope: scope, expiresAt: Date().addingTimeInterval(seconds), audience: audience),
            secret: secret)
    }

    /// Claims as anyone may write them, missing or of the wrong type included.
    struct Claims: JWTPayload {
        /// A claim that is a list, or (wrongly) a string.
        enum Carts: Codable, Sendable {
            case list([String])
            case text(String)

            func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                switch self {
                case .list(let list): try container.encode(list)
                case .text(let text): try container.encode(text)
                }
            }
        }

        var sub: String? = "alice"
        var exp: Double? = Date().timeIntervalSince1970 + 3_600
        var nbf: Double?
        var iat: Double?
        var aud: [String]?
        var carts: Carts? = .list(["alice"])
        var scope: String? = "read write"

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// `claims` signed by `keys` (with `kid` in the header when given, and the header's `alg`
    /// when given: what the token claims, whatever signed it).
    static func signed(_ claims: Claims, by keys: JWTKeyCollection, kid: String? = nil, alg: String? = nil) async throws -> String {
        var header = JWTHeader()
        if let alg { header.alg = alg }
        return try await keys.sign(claims, kid: kid.map { JWKIdentifier(string: $0) }, header: header)
    }

    static func hmac(_ secret: String) async -> JWTKeyCollection {
        await JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
    }

    /// A token whose header says `alg: none`, with no signature.
    static func unsigned(_ claims: Claims) throws -> String {
        let header = base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8))
        return header + "." + base64URL(try JSONEncoder().encode(claims)) + "."
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    // MARK: Keys

    /// An RSA key pair made for these tests (2048 bits): its public half is the server's
    /// `--jwt-key`.
    static let rsaPrivateKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCrQ6HSDhxgjPQu
        JUrszZQvMEH/dVnCoIAPgQKJJwtx+nAUc9Gz+3u44sYDsgsOyeBnYGNdeDFIT2m7
        Db71h70GQm+ZPCu7ZF5ybmR/5mMPEvlGQgmkAbvkBWHfem96SlqAJWgwFpyUkUbh
        djy4T+/3bT3uJRExbjFjon77LCIp4utFu8YUhGJhA+CatA7F1Pm+V+IklaadUVDK
        4VtHMm2JI0tFbd9GHnDULJzvQbNtCO9lbnPwCYJ+vNE/WHSYcQ2unNFhV0Td9NCk
        OXdJG+nZpFCnMymIFVDFiLhAh4A5Yh0Jmvp1YhOTuf4XWAfJ0csu+XE93dEtP1as
        65hGOM9BAgMBAAECggEAAwBV6yT1KVn/A3oC1KCLqsIJPg1T6929MMhdf4LQKAiw
        AyO+do1/Lw/GUZVCrVkrVhRx2Vb8YhyGKVGF2a6tyNjMNN7Bk3CgWRgHKdijPsXh
        2XHZ0mZ3YPkZLH3sSzPXXyyIpWMYDmB3Ygcc7Ev2VBs1fSFoKjoYonrcB9HPrXU1
        ux+Pwl7wVqc52VS7aJ7LVq2PQNjGCtSQz5OZE1IA7XvWlLJwYHgrLFxWdckMw7G4
        QNlQFvEKc9DpNtXZdzHsnQ4+3YUH5iGGlyjR7GIGh8SOQlZ9D8/cS37APWD7pe/v
        KndmzcHPdYwBM8+Yx1Qgrw1/1fuzDIb7oE1sWD2G4QKBgQDZo42YuE8sYdDTT9fL
        J/6eIiAija3LRIVITnJsD0QK/1+dOQSP3VD63+SaY+3aJgcOKdtioYCb6r+AAcUs
        k2RFDp6DSLbb/IoDIuqabMPmMx7sPzSBFYsA/WbxXjWDvaPIQoP4Vvyd1eIeK/XV
        kvvJUk6iQrQ13o6eMmJRNKvkeQKBgQDJc4d5ftMWqLM39wg7vI1eEXxOJ4+5je84
        RCvrVgFGrbQQAUMRBJlhxnkWd2A1ZFJ4O1Y60iC4BiT8mGSETdnk04O6Xb+iPbbf
        oVBnkgSrUSGjgq//MySIw8ZyfNny6p4ZZar0CmvgNTbGNzbSftp2Ze60y1e9XEez
        ZlpTEZQ/CQKBgQCeUYWdhOXDSVyZe0llNbDY48YwnJPCfBPgp4BA71H2FhM90c5p
        wPs5pEktrmfF+0fCm9xFgWqHAVtRCPigFpAoVBwnMGwk1y6mXW3/7AMNoD5saQYO
        qNc3Xx7VkkynivproUdTDiQxxPb6L8xjEssqhj9BdfiV/1IL7mbq37/zMQKBgCRg
        QiRELGW5DLOcXdY7k+NakPGj3yYIZRvp42xZWV2j3BHPyIZ4KCIpro/J+otplCK1
        xDpW2yWfpmoeMnhZfnD9aJnsd8AaGL2E6XnqOgGdYs+dt54DZCN2Bo2B0fE1QFsh
        qp7qitQvh7Z/Hd0gnt4mRdZLqYo98YyJfOHnGLfRAoGAfcIxXg16012JjsR/W17S
        hTbUBo0BnzBa5VsOlrWkKRVIRvg9iCWKqlWQI8Eecryudq/sle+6KVnIhbxnR6nv
        scQ6wrmEiw6V9vCzwQvgSjBGXzLbonlomZqHbZvcDRzh48YduyStxGofxbvdW1WZ
        7OGueUHxPtijVgW3Kh2jiGM=
        -----END PRIVATE KEY-----
        """

    static func rsa() async throws -> (keys: JWTKeyCollection, publicPEM: String) {
        let key = try Insecure.RSA.PrivateKey(pem: rsaPrivateKeyPEM)
        return (await JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha256), key.publicKey.pemRepresentation)
    }
}

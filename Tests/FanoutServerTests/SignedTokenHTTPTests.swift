import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import JWTKit
import Logging
import Testing

@testable import CartStore
@testable import FanoutServer

/// Signed tokens over HTTP: each user reads, lists, follows and changes only the carts of her
/// token, an admin token (`"carts":["*"]`) all of them, and a token that is not a valid one is
/// 401 `invalid_token`, never a 500 and never an echo of the token.
@Suite("Signed tokens over HTTP")
struct SignedTokenHTTPTests {
    static let operatorToken = "the operator's key"

    static func app(_ configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> FanoutServerApp {
        try await HTTPAPITests.app {
            $0.token = operatorToken
            $0.jwtSecret = Tokens.secret
            configure(&$0)
        }
    }

    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }

    static let item = HTTPAPITests.body(#"{"sku":"apple","quantity":1,"unitPriceCents":50}"#)

    /// The ids of a `{"carts":[…]}` answer.
    static func cartIDs(_ buffer: ByteBuffer) -> [String] {
        (HTTPAPITests.json(buffer)["carts"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    static func eventCarts(_ buffer: ByteBuffer) -> [String] {
        (HTTPAPITests.json(buffer)["events"] as? [[String: Any]] ?? []).compactMap { $0["cartId"] as? String }
    }

    @Test func aliceReadsListsFollowsAndChangesOnlyHerCartsAndAnAdminAllOfThem() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["alice", "alice-wishlist"])
        let admin = try await Tokens.hs256("admin", carts: ["*"])
        try await Self.app().application.test(.router) { client in
            for cart in ["alice", "alice-wishlist", "bob"] {
                try await client.execute(
                    uri: "/carts/\(cart)/items", method: .post, headers: Self.bearer(Self.operatorToken), body: Self.item
                ) {
                    #expect($0.status == .ok)
                }
            }
            // List: only hers, for her; all, for the admin.
            try await client.execute(uri: "/carts", method: .get, headers: Self.bearer(alice)) {
                #expect($0.status == .ok)
                #expect(Self.cartIDs($0.body).sorted() == ["alice", "alice-wishlist"])
            }
            try await client.execute(uri: "/carts?token=\(admin)", method: .get) {
                #expect(Self.cartIDs($0.body).sorted() == ["alice", "alice-wishlist", "bob"])
            }
            // Read: bob's is 403 for her, whether or not it exists; the admin reads it.
            for cart in ["bob", "nobody-yet"] {
                try await client.execute(uri: "/carts/\(cart)", method: .get, headers: Self.bearer(alice)) {
                    #expect($0.status == .forbidden)
                    #expect(HTTPAPITests.errorCode($0.body) == "forbidden_cart")
                }
            }
            try await client.execute(uri: "/carts/alice-wishlist?token=\(alice)", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts/bob", method: .get, headers: Self.bearer(admin)) { #expect($0.status == .ok) }
            // Follow: only her carts' events; naming bob's is 403.
            try await client.execute(uri: "/events?since=0", method: .get, headers: Self.bearer(alice)) {
                #expect(Self.eventCarts($0.body) == ["alice", "alice-wishlist"])
            }
            try await client.execute(uri: "/events?since=0&carts=alice,bob", method: .get, headers: Self.bearer(alice)) {
                #expect($0.status == .forbidden)
                #expect(HTTPAPITests.errorCode($0.body) == "forbidden_cart")
            }
            try await client.execute(uri: "/events?since=0", method: .get, headers: Self.bearer(admin)) {
                #expect(Self.eventCarts($0.body) == ["alice", "alice-wishlist", "bob"])
            }
            // Change: every mutation of bob's cart is 403 for her, and leaves it as it was.
            let changes: [(String, HTTPRequest.Method, ByteBuffer?)] = [
                ("/carts/bob/items", .post, Self.item),
                ("/carts/bob/items/apple", .patch, HTTPAPITests.body(#"{"quantity":7}"#)),
                ("/carts/bob/items/apple", .delete, nil),
                ("/carts/bob", .delete, nil),
            ]
            for (uri, method, body) in changes {
                try await client.execute(uri: uri, method: method, headers: Self.bearer(alice), body: body ?? ByteBuffer()) {
                    #expect($0.status == .forbidden, "\(method) \(uri)")
                    #expect(HTTPAPITests.errorCode($0.body) == "forbidden_cart", "\(method) \(uri)")
                }
            }
            try await client.execute(uri: "/carts/bob", method: .get, headers: Self.bearer(admin)) {
                #expect((HTTPAPITests.json($0.body)["cart"] as? [String: Any])?["version"] as? Int == 1, "bob's cart is unchanged")
            }
            try await client.execute(uri: "/carts/alice/items", method: .post, headers: Self.bearer(alice), body: Self.item) {
                #expect($0.status == .ok)
            }
            try await client.execute(
                uri: "/carts/bob/items/apple", method: .patch, headers: Self.bearer(admin), body: HTTPAPITests.body(#"{"quantity":3}"#)
            ) {
                #expect($0.status == .ok)
            }
        }
    }

    @Test func changesNeedTheWriteScopeAndStatsTheOperatorsToken() async throws {
        let reader = try await Tokens.hs256("alice", carts: ["alice"], scope: "read")
        let writer = try await Tokens.hs256("alice", carts: ["alice"], scope: "write")
        try await Self.app().application.test(.router) { client in
            try await client.execute(uri: "/carts/alice/items", method: .post, headers: Self.bearer(reader), body: Self.item) {
                #expect($0.status == .forbidden)
                #expect(HTTPAPITests.errorCode($0.body) == "insufficient_scope")
                #expect($0.headers[.wwwAuthenticate] == #"Bearer error="insufficient_scope""#)
            }
            try await client.execute(uri: "/carts/alice/items", method: .post, headers: Self.bearer(writer), body: Self.item) {
                #expect($0.status == .ok)
            }
            try await client.execute(uri: "/carts/alice", method: .get, headers: Self.bearer(writer)) {
                #expect($0.status == .forbidden, "write alone does not read")
                #expect(HTTPAPITests.errorCode($0.body) == "insufficient_scope")
            }
            // A change never takes its token from the URL.
            try await client.execute(uri: "/carts/alice/items?token=\(writer)", method: .post, body: Self.item) {
                #expect($0.status == .unauthorized)
                #expect(HTTPAPITests.errorCode($0.body) == "unauthorized")
                #expect($0.headers[.wwwAuthenticate] == #"Bearer realm="fanout""#)
            }
            for path in ["/stats", "/metrics"] {
                try await client.execute(uri: path, method: .get, headers: Self.bearer(reader)) {
                    #expect($0.status == .forbidden, "\(path)")
                    #expect(HTTPAPITests.errorCode($0.body) == "insufficient_scope")
                }
                try await client.execute(uri: path, method: .get) { #expect($0.status == .unauthorized, "\(path)") }
                try await client.execute(uri: path, method: .get, headers: Self.bearer(Self.operatorToken)) {
                    #expect($0.status == .ok, "\(path)")
                }
            }
            // What holds no carts stays open.
            for path in ["/", "/healthz", "/openapi.json"] {
                try await client.execute(uri: path, method: .get) { #expect($0.status == .ok, "\(path)") }
            }
        }
    }

    @Test func aLongPollOfAliceWakesOnlyWithHerCartsEvents() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["alice"])
        let app = try await Self.app()
        try await app.application.test(.router) { client in
            async let answer = client.execute(uri: "/events?since=0&wait=10", method: .get, headers: Self.bearer(alice))
            // Bob's change commits first; hers after: the long-poll answers hers alone.
            await eventually("the long-poll to wait") { app.hub.longPolls.count == 1 }
            _ = try await app.store.addItem(cartID: "bob", sku: "pear", quantity: 1, unitPriceCents: 5)
            _ = try await app.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 5)
            let response = try await answer
            #expect(response.status == .ok)
            #expect(Self.eventCarts(response.body) == ["alice"])
        }
    }

    /// A long-poll ends at its token's `exp` with 401, as a stream does: an event committed
    /// after it never reaches the request (it once answered 200 with it, 3.8 s after `exp`).
    @Test func aLongPollEndsAtItsTokensExpiry() async throws {
        let app = try await Self.app()
        try await app.application.test(.router) { client in
            let alice = try await Tokens.hs256("alice", carts: ["alice"], expiresIn: 3)
            let expiry = Date().addingTimeInterval(3)
            async let answer = client.execute(uri: "/events?since=0&wait=30", method: .get, headers: Self.bearer(alice))
            // It parks, and ends at the token's exp; on a busy machine its exp may pass before it
            // parks, and it ends at once, the same way.
            await eventually("the token's exp passed with no long-poll waiting") { Date() > expiry && app.hub.longPolls.count == 0 }
            _ = try await app.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 5)
            let response = try await answer
            #expect(response.status == .unauthorized)
            #expect(HTTPAPITests.errorCode(response.body) == "invalid_token")
            #expect(response.headers[.wwwAuthenticate] == #"Bearer error="invalid_token""#)
            #expect(Self.eventCarts(response.body).isEmpty)
        }
    }

    /// Every kind of bad token the issue names, against a server with an HS256 secret, an RSA
    /// public key and an audience: 401 `invalid_token` with the challenge, a message that says
    /// why, and never the token itself.
    @Test func forgedExpiredAndMalformedTokensAre401AndNever500() async throws {
        let (rsaKeys, rsaPublicPEM) = try await Tokens.rsa()
        let shop = ["shop"]
        var good = Tokens.Claims()
        good.aud = shop
        let now = Date().timeIntervalSince1970
        var expired = good
        expired.exp = now - 60
        var notYet = good
        notYet.nbf = now + 3_600
        var issuedLater = good
        issuedLater.iat = now + 3_600
        var otherAudience = good
        otherAudience.aud = ["another-shop"]
        var noExp = good
        noExp.exp = nil
        var noSub = good
        noSub.sub = nil
        // A sub no engine stores alike: PostgreSQL refused a NUL in text, which failed every
        // presence write of the server that held it.
        var nulInSub = good
        nulInSub.sub = "nul\u{0}user"
        var newlineInSub = good
        newlineInSub.sub = "line\nbreak"
        var longSub = good
        longSub.sub = String(repeating: "é", count: 129)
        var cartsText = good
        cartsText.carts = .text("alice")
        var badCartID = good
        badCartID.carts = .list(["not a cart id"])
        let hmac = await Tokens.hmac(Tokens.secret)
        let randomBytes = Tokens.base64URL(Data((0..<64).map { _ in UInt8.random(in: 0...255) }))
        let forged: [(String, String, String)] = [
            ("alg none", try Tokens.unsigned(good), "algorithm"),
            ("HS256 signed with the RSA public key", try await Tokens.signed(good, by: await Tokens.hmac(rsaPublicPEM)), "signature"),
            (
                "HS256 signed with the public key, claiming RS256",
                try await Tokens.signed(good, by: await Tokens.hmac(rsaPublicPEM), alg: "RS256"), "signature"
            ),
            ("a wrong secret", try await Tokens.signed(good, by: await Tokens.hmac(String(repeating: "x", count: 40))), "signature"),
            ("an unknown kid", try await Tokens.signed(good, by: rsaKeys, kid: "nobody-has-this"), "kid"),
            ("expired", try await Tokens.signed(expired, by: hmac), "expired"),
            ("nbf in the future", try await Tokens.signed(notYet, by: rsaKeys), "not valid yet"),
            ("iat in the future", try await Tokens.signed(issuedLater, by: hmac), "issued in the future"),
            ("another audience", try await Tokens.signed(otherAudience, by: hmac), "audience"),
            ("no audience", try await Tokens.signed(Tokens.Claims(), by: hmac), "audience"),
            ("exp missing", try await Tokens.signed(noExp, by: hmac), "no exp"),
            ("sub missing", try await Tokens.signed(noSub, by: hmac), "no sub"),
            ("a NUL in sub", try await Tokens.signed(nulInSub, by: hmac), "sub contains a control character"),
            ("a newline in sub", try await Tokens.signed(newlineInSub, by: rsaKeys), "sub contains a control character"),
            ("sub of 258 bytes", try await Tokens.signed(longSub, by: hmac), "sub is longer than 256 bytes"),
            ("carts not an array", try await Tokens.signed(cartsText, by: rsaKeys), "carts"),
            ("carts naming an invalid id", try await Tokens.signed(badCartID, by: hmac), "carts"),
            ("16 KiB", String(repeating: "a", count: 16 * 1_024), "longer than"),
            ("random bytes", randomBytes, "not a JWT"),
            ("three random parts", "\(randomBytes).\(randomBytes).\(randomBytes)", "not a JWT"),
        ]
        // A sub of 256 bytes is still a name (128 two-byte characters).
        var longestSub = good
        longestSub.sub = String(repeating: "é", count: 128)
        let accepted = [
            try await Tokens.signed(good, by: hmac), try await Tokens.signed(good, by: rsaKeys),
            try await Tokens.signed(longestSub, by: hmac),
        ]
        let app = try await Self.app {
            $0.jwtKey = rsaPublicPEM
            $0.jwtAudience = "shop"
        }
        try await app.application.test(.router) { client in
            for (name, token, reason) in forged {
                for (uri, method, body) in [
                    ("/carts/alice", HTTPRequest.Method.get, ByteBuffer()), ("/carts/alice/items", .post, Self.item),
                ] {
                    try await client.execute(uri: uri, method: method, headers: Self.bearer(token), body: body) { response in
                        #expect(response.status == .unauthorized, "\(name): \(method) \(uri)")
                        #expect(HTTPAPITests.errorCode(response.body) == "invalid_token", "\(name)")
                        #expect(response.headers[.wwwAuthenticate] == #"Bearer error="invalid_token""#, "\(name)")
                        let message = (HTTPAPITests.json(response.body)["error"] as? [String: Any])?["message"] as? String ?? ""
                        #expect(message.contains(reason), "\(name): \(message)")
                        #expect(!message.contains(token.prefix(20)), "\(name): the message quotes the token")
                    }
                }
            }
            // The same claims, rightly signed with either key, are accepted.
            for token in accepted {
                try await client.execute(uri: "/carts/alice/items", method: .post, headers: Self.bearer(token), body: Self.item) {
                    #expect($0.status == .ok)
                }
            }
            // Nothing forged got through: alice's cart has the accepted tokens' changes alone.
            try await client.execute(uri: "/events?since=0", method: .get, headers: Self.bearer(Self.operatorToken)) {
                #expect(Self.eventCarts($0.body).count == 3)
            }
        }
    }

    /// A JWKS in `--jwt-key`: each key is picked by its `kid`, and accepts only its algorithm.
    @Test func aJWKSTakesP256AndEd25519KeysByKid() async throws {
        let ec = ES256PrivateKey()
        let ed = try EdDSA.PrivateKey()
        let ecPublic = try #require(ec.publicKey.parameters)
        let jwks = """
            {"keys":[
              {"kty":"EC","crv":"P-256","kid":"ec-1","x":"\(ecPublic.x)","y":"\(ecPublic.y)"},
              {"kty":"OKP","crv":"Ed25519","kid":"ed-1","x":"\(Tokens.base64URL(ed.publicKey.rawRepresentation))"}
            ]}
            """
        let ecKeys = await JWTKeyCollection().add(ecdsa: ec, kid: "ec-1")
        let edKeys = await JWTKeyCollection().add(eddsa: ed, kid: "ed-1")
        let app = try await HTTPAPITests.app { $0.jwtKey = jwks }
        try await app.application.test(.router) { client in
            for token in [
                try await Tokens.signed(Tokens.Claims(), by: ecKeys, kid: "ec-1"),
                try await Tokens.signed(Tokens.Claims(), by: edKeys, kid: "ed-1"),
            ] {
                try await client.execute(uri: "/carts/alice/items", method: .post, headers: Self.bearer(token), body: Self.item) {
                    #expect($0.status == .ok)
                }
            }
            let refused = [
                ("no kid", try await Tokens.signed(Tokens.Claims(), by: ecKeys)),
                ("an unknown kid", try await Tokens.signed(Tokens.Claims(), by: ecKeys, kid: "ec-2")),
                ("the P-256 key's kid on an EdDSA token", try await Tokens.signed(Tokens.Claims(), by: edKeys, kid: "ec-1")),
                ("alg none", try Tokens.unsigned(Tokens.Claims())),
                (
                    "HS256 signed with the P-256 public key",
                    try await Tokens.signed(Tokens.Claims(), by: await Tokens.hmac(ec.publicKey.pemRepresentation), kid: "ec-1")
                ),
            ]
            for (name, token) in refused {
                try await client.execute(uri: "/carts/alice", method: .get, headers: Self.bearer(token)) {
                    #expect($0.status == .unauthorized, "\(name)")
                    #expect(HTTPAPITests.errorCode($0.body) == "invalid_token", "\(name)")
                }
            }
            // Without --token, an operator's token is no credential at all.
            try await client.execute(uri: "/carts", method: .get, headers: Self.bearer("anything")) {
                #expect($0.status == .unauthorized)
                #expect(HTTPAPITests.errorCode($0.body) == "invalid_token")
            }
        }
    }

    @Test func keysThatCannotBeUsedAreRefusedAtStart() async throws {
        for key in ["not a key", #"{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}"#] {
            await #expect(throws: TokenKeys.Unusable.self) { try await TokenKeys(secret: nil, keyFile: key, audience: nil) }
        }
    }
}

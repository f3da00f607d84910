import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import CartStore
@testable import FanoutServer

/// `Idempotency-Key` on every change over HTTP: a repeat is answered the first answer, marked
/// `Idempotent-Replayed: true`; another request with the key is 422; a bad key is 400; keys
/// are per signed token's `sub`.
@Suite("Idempotency keys over HTTP")
struct IdempotencyHTTPTests {
    static let replayed = HTTPField.Name("Idempotent-Replayed")!

    static func keyed(_ key: String, _ more: HTTPFields = [:]) -> HTTPFields {
        var fields = more
        fields.append(HTTPField(name: HTTPField.Name("Idempotency-Key")!, value: key))
        return fields
    }

    static let apple = HTTPAPITests.body(#"{"sku":"apple","quantity":2,"unitPriceCents":50}"#)

    /// Every change route, with what it sends: the same key for each repeats the answer.
    static let routes: [(method: HTTPRequest.Method, uri: String, body: String?)] = [
        (.post, "/carts/c/items", #"{"sku":"pear","quantity":1,"unitPriceCents":90}"#),
        (.patch, "/carts/c/items/pear", #"{"quantity":5}"#),
        (.delete, "/carts/c/items/pear", nil),
        (.delete, "/carts/c", nil),
    ]

    @Test func everyChangeRouteAnswersARepeatWithTheFirstAnswerMarkedAsAReplay() async throws {
        let app = try await HTTPAPITests.app()
        try await app.application.test(.router) { client in
            try await client.execute(uri: "/carts/c/items", method: .post, body: Self.apple) { #expect($0.status == .ok) }
            for (index, route) in Self.routes.enumerated() {
                let key = "route-\(index)"
                let body = route.body.map(HTTPAPITests.body)
                let first = try await client.execute(uri: route.uri, method: route.method, headers: Self.keyed(key), body: body)
                #expect(first.status == .ok, "\(route.uri)")
                #expect(first.headers[Self.replayed] == nil)
                let again = try await client.execute(uri: route.uri, method: route.method, headers: Self.keyed(key), body: body)
                #expect(again.status == .ok, "\(route.uri)")
                #expect(again.headers[Self.replayed] == "true")
                #expect(String(buffer: again.body) == String(buffer: first.body), "the same body: cart, seq, deliveredTo")
                #expect(again.headers[.eTag] == first.headers[.eTag])
            }
            // One event per change, and the keyed ones carry their keys.
            try await client.execute(uri: "/events?since=0", method: .get) { response in
                let events = HTTPAPITests.json(response.body)["events"] as? [[String: Any]] ?? []
                #expect(events.map { $0["idempotencyKey"] as? String } == [nil, "route-0", "route-1", "route-2", "route-3"])
            }
        }
        #expect(try await wholeLogCount(app.store) == 5)
    }

    @Test func theSameKeyWithAnotherRequestIs422AndWritesNothing() async throws {
        let app = try await HTTPAPITests.app()
        try await app.application.test(.router) { client in
            try await client.execute(uri: "/carts/c/items", method: .post, headers: Self.keyed("k"), body: Self.apple) {
                #expect($0.status == .ok)
            }
            let others: [(HTTPRequest.Method, String, String?, HTTPFields)] = [
                (.post, "/carts/c/items", #"{"sku":"apple","quantity":3,"unitPriceCents":50}"#, [:]),
                (.post, "/carts/d/items", #"{"sku":"apple","quantity":2,"unitPriceCents":50}"#, [:]),
                (.post, "/carts/c/items", #"{"sku":"apple","quantity":2,"unitPriceCents":50}"#, [.ifMatch: "1"]),
                (.delete, "/carts/c", nil, [:]),
            ]
            for (method, uri, body, headers) in others {
                try await client.execute(uri: uri, method: method, headers: Self.keyed("k", headers), body: body.map(HTTPAPITests.body)) {
                    #expect($0.status == .unprocessableContent, "\(method) \(uri)")
                    #expect(HTTPAPITests.errorCode($0.body) == "idempotency_key_reused")
                }
            }
            // The same body written otherwise (key order, spaces) is the same request.
            try await client.execute(
                uri: "/carts/c/items", method: .post, headers: Self.keyed("k"),
                body: HTTPAPITests.body(#"{ "unitPriceCents": 50, "quantity": 2, "sku": "apple" }"#)
            ) {
                #expect($0.status == .ok)
                #expect($0.headers[Self.replayed] == "true")
            }
        }
        #expect(try await wholeLogCount(app.store) == 1)
    }

    @Test func aBadKeyIs400AndNothingIsWritten() async throws {
        let app = try await HTTPAPITests.app()
        try await app.application.test(.router) { client in
            for bad in [String(repeating: "k", count: 256), "with space", "\"\""] {
                try await client.execute(uri: "/carts/c/items", method: .post, headers: Self.keyed(bad), body: Self.apple) {
                    #expect($0.status == .badRequest, "\(bad.prefix(10))")
                    #expect(HTTPAPITests.errorCode($0.body) == "invalid_idempotency_key")
                    #expect(!String(buffer: $0.body).contains(bad), "the key is not echoed")
                }
            }
            try await client.execute(uri: "/carts/c/items", method: .post, headers: Self.keyed("a", Self.keyed("b")), body: Self.apple) {
                #expect($0.status == .badRequest)
                #expect(HTTPAPITests.errorCode($0.body) == "invalid_idempotency_key")
            }
            // The draft's string form: the quotes are not part of the key.
            try await client.execute(uri: "/carts/c/items", method: .post, headers: Self.keyed("\"quoted\""), body: Self.apple) {
                #expect($0.status == .ok)
            }
            try await client.execute(uri: "/carts/c/items", method: .post, headers: Self.keyed("quoted"), body: Self.apple) {
                #expect($0.headers[Self.replayed] == "true")
            }
        }
        #expect(try await wholeLogCount(app.store) == 1)
    }

    /// A refused change is not remembered: the same key, sent again once it can succeed, makes it.
    @Test func aRefusedChangeIsAnsweredAgainNotReplayed() async throws {
        let app = try await HTTPAPITests.app()
        try await app.application.test(.router) { client in
            let patch = HTTPAPITests.body(#"{"quantity":3}"#)
            try await client.execute(uri: "/carts/c/items/apple", method: .patch, headers: Self.keyed("k"), body: patch) {
                #expect($0.status == .notFound)
            }
            try await client.execute(uri: "/carts/c/items", method: .post, body: Self.apple) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts/c/items/apple", method: .patch, headers: Self.keyed("k"), body: patch) {
                #expect($0.status == .ok)
                #expect($0.headers[Self.replayed] == nil)
            }
        }
    }

    /// Keys are per user: Bob's key of the same name is his own, and never answers Alice's.
    @Test func aKeyIsTheUsersOwn() async throws {
        let alice = try await Tokens.hs256("alice", carts: ["shared"])
        let bob = try await Tokens.hs256("bob", carts: ["shared"])
        let app = try await SignedTokenHTTPTests.app()
        try await app.application.test(.router) { client in
            let first = try await client.execute(
                uri: "/carts/shared/items", method: .post, headers: Self.keyed("k", SignedTokenHTTPTests.bearer(alice)), body: Self.apple)
            let second = try await client.execute(
                uri: "/carts/shared/items", method: .post, headers: Self.keyed("k", SignedTokenHTTPTests.bearer(bob)), body: Self.apple)
            #expect(first.status == .ok && second.status == .ok)
            #expect(second.headers[Self.replayed] == nil)
            #expect(HTTPAPITests.json(second.body)["seq"] as? Int == 2)
            let again = try await client.execute(
                uri: "/carts/shared/items", method: .post, headers: Self.keyed("k", SignedTokenHTTPTests.bearer(alice)), body: Self.apple)
            #expect(again.headers[Self.replayed] == "true")
            #expect(String(buffer: again.body) == String(buffer: first.body))
        }
    }

    func wholeLogCount(_ store: CartStore) async throws -> Int {
        guard case .events(let events, _) = try await store.events(after: 0, limit: 1_000) else { return -1 }
        return events.count
    }
}

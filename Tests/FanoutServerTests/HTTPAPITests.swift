import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import CartStore
@testable import FanoutServer

@Suite("HTTP API")
struct HTTPAPITests {
    static func app(_ configure: (inout ServerConfiguration) -> Void = { _ in }) async throws -> FanoutServerApp {
        var configuration = ServerConfiguration()
        configuration.port = 0
        configure(&configuration)
        var logger = Logger(label: "fanout-test")
        logger.logLevel = .critical
        return try await buildApplication(configuration: configuration, store: try CartStore.inMemory(), logger: logger)
    }

    /// The body as a JSON object; empty (and so failing the checks that read it) if it is not one.
    static func json(_ buffer: ByteBuffer) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer: buffer))) as? [String: Any] ?? [:]
    }

    static func errorCode(_ buffer: ByteBuffer) -> String? {
        (json(buffer)["error"] as? [String: Any])?["code"] as? String
    }

    static func body(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    /// Every read answer says the identity of the database it read.
    @Test func readAnswersSayTheDatabaseIdentity() async throws {
        let app = try await Self.app()
        try await app.store.addItem(cartID: "alice", sku: "apple", quantity: 1, unitPriceCents: 5)
        try await app.application.test(.router) { client in
            for uri in ["/carts", "/carts/alice", "/events?since=0", "/events?since=1&wait=0"] {
                try await client.execute(uri: uri, method: .get) { response in
                    #expect(response.status == .ok, "\(uri)")
                    #expect(Self.json(response.body)["databaseId"] as? String == app.store.databaseID, "\(uri)")
                }
            }
        }
    }

    @Test func changeACartAndReadItBack() async throws {
        try await Self.app().application.test(.router) { client in
            try await client.execute(
                uri: "/carts/alice/items", method: .post,
                body: Self.body(#"{"sku":"apple","quantity":2,"unitPriceCents":50,"name":"Apple"}"#)
            ) { response in
                #expect(response.status == .ok)
                let object = Self.json(response.body)
                #expect(object["seq"] as? Int == 1)
                #expect(object["deliveredTo"] as? Int == 0)
                let cart = try #require(object["cart"] as? [String: Any])
                #expect(cart["totalCents"] as? Int == 100)
                #expect(cart["version"] as? Int == 1)
                #expect(response.headers[.eTag] == "\"1\"")
                // What fanout-client decodes: FanoutProtocol's answer, with the Cart of the snapshot.
                let answer = try FanoutJSON.decoder().decode(MutationResponse.self, from: Data(buffer: response.body))
                #expect(
                    answer
                        == MutationResponse(
                            cart: Cart(
                                id: "alice", version: 1, items: [CartItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: "Apple")]),
                            seq: 1, deliveredTo: 0))
            }
            try await client.execute(
                uri: "/carts/alice/items/apple", method: .patch, headers: [.ifMatch: "\"1\""],
                body: Self.body(#"{"quantity":5}"#)
            ) { response in
                #expect(response.status == .ok)
                #expect(Self.json(response.body)["seq"] as? Int == 2)
            }
            try await client.execute(uri: "/carts/alice", method: .get) { response in
                let object = Self.json(response.body)
                let cart = try #require(object["cart"] as? [String: Any])
                #expect(cart["itemCount"] as? Int == 5)
                #expect(object["seq"] as? Int == 2)
            }
            try await client.execute(uri: "/carts/alice/items/apple", method: .delete) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts/alice", method: .delete) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts", method: .get) { response in
                let carts = try #require(Self.json(response.body)["carts"] as? [[String: Any]])
                #expect(carts.count == 1)
                #expect(carts.first?["version"] as? Int == 4)
            }
            try await client.execute(uri: "/events?since=1&limit=2", method: .get) { response in
                let object = Self.json(response.body)
                let events = try #require(object["events"] as? [[String: Any]])
                #expect(events.map { $0["seq"] as? Int } == [2, 3])
                #expect(events.map { $0["kind"] as? String } == ["quantityChanged", "itemRemoved"])
                #expect(object["nextSince"] as? Int == 3)
                #expect(object["latestSeq"] as? Int == 4)
            }
            try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/stats", method: .get) { response in
                #expect(Self.json(response.body)["latestSeq"] as? Int == 4)
            }
        }
    }

    @Test(arguments: [
        (
            "/carts/alice/items", HTTPRequest.Method.post, #"{"sku":"apple","quantity":2"#, HTTPResponse.Status.badRequest,
            "malformed_request"
        ),
        ("/carts/alice/items", .post, #"{"sku":"apple","quantity":"two","unitPriceCents":1}"#, .badRequest, "malformed_request"),
        ("/carts/alice/items", .post, #"{"sku":"apple"}"#, .badRequest, "malformed_request"),
        ("/carts/alice/items", .post, #"{"sku":"apple","quantity":0,"unitPriceCents":1}"#, .unprocessableContent, "invalid_quantity"),
        ("/carts/alice/items", .post, #"{"sku":"a b","quantity":1,"unitPriceCents":1}"#, .unprocessableContent, "invalid_sku"),
        ("/carts/al!ce/items", .post, #"{"sku":"a","quantity":1,"unitPriceCents":1}"#, .unprocessableContent, "invalid_cart_id"),
        ("/carts/alice/items", .post, #"{"sku":"a","quantity":1,"unitPriceCents":-5}"#, .unprocessableContent, "invalid_price"),
        ("/carts/ghost", .get, "", .notFound, "cart_not_found"),
        ("/carts/ghost", .delete, "", .notFound, "cart_not_found"),
        ("/carts/ghost/items/a", .patch, #"{"quantity":1}"#, .notFound, "cart_not_found"),
        ("/nowhere", .get, "", .notFound, "not_found"),
        ("/events?since=abc", .get, "", .unprocessableContent, "invalid_since"),
        ("/events?since=99", .get, "", .conflict, "since_ahead"),
        ("/events?limit=0", .get, "", .unprocessableContent, "invalid_limit"),
    ])
    func badInputGetsItsStatusAndCode(uri: String, method: HTTPRequest.Method, body: String, status: HTTPResponse.Status, code: String)
        async throws
    {
        try await Self.app().application.test(.router) { client in
            try await client.execute(uri: uri, method: method, body: Self.body(body)) { response in
                #expect(response.status == status)
                #expect(Self.errorCode(response.body) == code)
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
            }
        }
    }

    @Test func conflictsAndLimits() async throws {
        try await Self.app().application.test(.router) { client in
            let add = Self.body(#"{"sku":"a","quantity":9999,"unitPriceCents":1}"#)
            try await client.execute(uri: "/carts/c/items", method: .post, body: add) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts/c/items", method: .post, body: Self.body(#"{"sku":"a","quantity":2,"unitPriceCents":1}"#))
            { response in
                #expect(response.status == .conflict)
                #expect(Self.errorCode(response.body) == "quantity_overflow")
            }
            try await client.execute(uri: "/carts/c", method: .delete, headers: [.ifMatch: "7"]) { response in
                #expect(response.status == .preconditionFailed)
                #expect(Self.errorCode(response.body) == "version_conflict")
            }
            try await client.execute(uri: "/carts/c", method: .delete, headers: [.ifMatch: "soon"]) { response in
                #expect(response.status == .badRequest)
            }
            let huge = ByteBuffer(repeating: UInt8(ascii: "x"), count: 70_000)
            try await client.execute(uri: "/carts/c/items", method: .post, body: huge) { response in
                #expect(response.status == .contentTooLarge)
                #expect(Self.errorCode(response.body) == "body_too_large")
            }
            // Nothing above changed the cart.
            try await client.execute(uri: "/carts/c", method: .get) { response in
                #expect((Self.json(response.body)["cart"] as? [String: Any])?["version"] as? Int == 1)
            }
        }
    }

    @Test func prunedHistoryIsGone() async throws {
        let app = try await Self.app()
        for index in 0..<5 {
            try await app.store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        try await app.store.pruneEvents(keepingLast: 2)
        try await app.application.test(.router) { client in
            try await client.execute(uri: "/events?since=1", method: .get) { response in
                #expect(response.status == .gone)
                let error = try #require(Self.json(response.body)["error"] as? [String: Any])
                #expect(error["code"] as? String == "history_too_old")
                #expect(error["oldestRetainedSeq"] as? Int == 4)
            }
        }
    }

    @Test func aWrongOrMissingTokenIsRefusedWithItsOwnCode() async throws {
        try await Self.app { $0.token = "s3cret" }.application.test(.router) { client in
            let add = Self.body(#"{"sku":"a","quantity":1,"unitPriceCents":1}"#)
            try await client.execute(uri: "/carts/c/items", method: .post, body: add) { response in
                #expect(response.status == .unauthorized)
                #expect(Self.errorCode(response.body) == "unauthorized")
            }
            try await client.execute(uri: "/carts/c/items", method: .post, headers: [.authorization: "Bearer wrong"], body: add) {
                response in
                #expect(response.status == .forbidden)
                #expect(Self.errorCode(response.body) == "bad_token")
            }
            try await client.execute(uri: "/carts/c/items", method: .post, headers: [.authorization: "Bearer s3cret"], body: add) {
                response in
                #expect(response.status == .ok)
            }
        }
    }

    /// With a token, carts, the log and the figures are the user's: only the page (which holds no
    /// data), `/healthz` and the schema are open.
    @Test(arguments: [
        ("/carts", HTTPRequest.Method.get), ("/carts/c", .get), ("/stats", .get), ("/metrics", .get), ("/events", .get),
        ("/carts/c/items", .post), ("/carts/c/items/a", .patch), ("/carts/c/items/a", .delete), ("/carts/c", .delete),
    ])
    func everythingButHealthAndTheSchemaNeedsTheToken(uri: String, method: HTTPRequest.Method) async throws {
        let app = try await Self.app { $0.token = "s3cret" }
        try await app.store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        let body = method == .get || method == .delete ? Self.body("") : Self.body(#"{"sku":"b","quantity":1,"unitPriceCents":1}"#)
        try await app.application.test(.router) { client in
            try await client.execute(uri: uri, method: method, body: body) { response in
                #expect(response.status == .unauthorized, "\(method) \(uri) answered without the token")
            }
            try await client.execute(uri: uri, method: method, headers: [.authorization: "Bearer s3cret"], body: body) { response in
                #expect(response.status.code < 400, "\(method) \(uri) refused with the token: \(response.status)")
            }
            for open in ["/", "/healthz", "/openapi.json"] {
                try await client.execute(uri: open, method: .get) { #expect($0.status == .ok, "\(open)") }
            }
        }
    }

    /// `?token=` is for what a browser cannot give headers to (a WebSocket, an `EventSource`, a
    /// plain link): reads only. A change must carry the header.
    @Test func theTokenInTheURLIsForReadsOnly() async throws {
        let app = try await Self.app { $0.token = "s3cret" }
        try await app.store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await app.application.test(.router) { client in
            for uri in ["/carts?token=s3cret", "/carts/c?token=s3cret", "/events?token=s3cret", "/stats?token=s3cret"] {
                try await client.execute(uri: uri, method: .get) { #expect($0.status == .ok, "GET \(uri)") }
            }
            try await client.execute(uri: "/carts?token=wrong", method: .get) { #expect($0.status == .forbidden) }
            let add = Self.body(#"{"sku":"b","quantity":1,"unitPriceCents":1}"#)
            try await client.execute(uri: "/carts/c/items?token=s3cret", method: .post, body: add) { response in
                #expect(response.status == .unauthorized)
                #expect(Self.errorCode(response.body) == "unauthorized")
            }
            try await client.execute(uri: "/carts/c?token=s3cret", method: .delete) { #expect($0.status == .unauthorized) }
            try await client.execute(uri: "/carts/c", method: .get, headers: [.authorization: "Bearer s3cret"]) { response in
                #expect((Self.json(response.body)["cart"] as? [String: Any])?["version"] as? Int == 1, "nothing changed")
            }
        }
    }

    @Test func allowedOriginsGetCORSHeadersAndTheirPreflightsAnswered() async throws {
        try await Self.app {
            $0.allowedOrigins = ["http://localhost:3000"]
            $0.token = "s3cret"
        }.application.test(.router) { client in
            let app: HTTPFields = [
                .origin: "http://localhost:3000", .accessControlRequestMethod: "POST",
                .accessControlRequestHeaders: "content-type, authorization",
            ]
            try await client.execute(uri: "/carts/c/items", method: .options, headers: app) { response in
                #expect(response.status == .noContent)
                #expect(response.headers[.accessControlAllowOrigin] == "http://localhost:3000")
                #expect(response.headers[.accessControlAllowMethods]?.contains("POST") == true)
                #expect(response.headers[.accessControlAllowHeaders]?.contains("Content-Type") == true)
            }
            let add = Self.body(#"{"sku":"a","quantity":1,"unitPriceCents":1}"#)
            let headers: HTTPFields = [.origin: "http://localhost:3000", .authorization: "Bearer s3cret", .contentType: "application/json"]
            try await client.execute(uri: "/carts/c/items", method: .post, headers: headers, body: add) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.accessControlAllowOrigin] == "http://localhost:3000")
                #expect(response.headers[.accessControlExposeHeaders] == "ETag, Idempotent-Replayed")
            }
            // Errors too, or the page could not read why.
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "http://localhost:3000"]) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.accessControlAllowOrigin] == "http://localhost:3000")
            }
            // Another origin gets neither the preflight nor the headers.
            var other = app
            other[.origin] = "http://evil.example"
            try await client.execute(uri: "/carts/c/items", method: .options, headers: other) { response in
                #expect(response.status == .forbidden)
                #expect(response.headers[.accessControlAllowOrigin] == nil)
            }
        }
    }

    /// `/healthz` is what a supervisor watches: a server whose store cannot write is not healthy,
    /// even though it still answers reads.
    @Test func healthSaysWhenTheStoreCannotWrite() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-health-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appending(path: "store.sqlite").path
        try CartStore(path: path).close()
        // As a read-only file or mount opens (tests run as root, where file modes do not stop writes).
        var readOnly = Configuration()
        readOnly.readonly = true
        var logger = Logger(label: "fanout-test")
        logger.logLevel = .critical
        let store = try CartStore(writer: DatabasePool(path: path, configuration: readOnly))
        try await buildApplication(configuration: .init(), store: store, logger: logger).application.test(.router) { client in
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(Self.errorCode(response.body) == "store_unavailable")
            }
            try await client.execute(uri: "/carts", method: .get) { #expect($0.status == .ok, "reads still work") }
        }
        try await Self.app().application.test(.router) { client in
            try await client.execute(uri: "/healthz", method: .get) { #expect($0.status == .ok) }
        }
    }

    @Test func browserOriginsMustBeAllowed() async throws {
        try await Self.app { $0.allowedOrigins = ["http://localhost:3000"] }.application.test(.router) { client in
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "http://evil.example"]) { response in
                #expect(response.status == .forbidden)
                #expect(Self.errorCode(response.body) == "origin_not_allowed")
            }
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "null"]) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "http://localhost:3000"]) { #expect($0.status == .ok) }
            // Non-browser WebSocket clients name their own ws:// URL; no web page can.
            try await client.execute(uri: "/carts", method: .get, headers: [.origin: "ws://127.0.0.1"]) { #expect($0.status == .ok) }
            try await client.execute(uri: "/carts", method: .get) { #expect($0.status == .ok) }
        }
    }

    /// The page at `/` changes carts from the server's own origin, which a browser names on a
    /// POST: that origin needs no `--allow-origin`; another port or name is another origin. The
    /// same name and port with `https` is its own too: the page served by a proxy that ends TLS
    /// in front (docs/OPERATING.md, "TLS").
    @Test func theServersOwnOriginMayChangeCarts() async throws {
        try await Self.app().application.test(.router) { client in
            let body = ByteBuffer(string: #"{"sku":"s","quantity":1,"unitPriceCents":1}"#)
            // The router's test client names its requests' authority (`Host`) "localhost".
            let own: HTTPFields = [.origin: "http://localhost", .contentType: "application/json"]
            try await client.execute(uri: "/carts/c/items", method: .post, headers: own, body: body) { #expect($0.status == .ok) }
            var proxied = own
            proxied[.origin] = "https://localhost"
            try await client.execute(uri: "/carts/c/items", method: .post, headers: proxied, body: body) { #expect($0.status == .ok) }
            for other in ["http://localhost:8080", "http://127.0.0.1", "https://localhost:8443", "https://127.0.0.1"] {
                var headers = own
                headers[.origin] = other
                try await client.execute(uri: "/carts/c/items", method: .post, headers: headers, body: body) { response in
                    #expect(response.status == .forbidden, "\(other)")
                    #expect(Self.errorCode(response.body) == "origin_not_allowed")
                }
            }
        }
    }
}

import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FanoutServer

/// `GET /openapi.json` serves `docs/openapi.json`, and every operation it lists has a route.
/// (Whether the server answers as the document says is the contract tests' part, with
/// schemathesis, in EndToEndTests.)
@Suite("OpenAPI document")
struct OpenAPIDocumentTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func documentInRepository() throws -> Data {
        try Data(contentsOf: repository.appending(path: "docs/openapi.json"))
    }

    @Test func theServerServesTheDocumentInTheRepository() async throws {
        let expected = try Self.documentInRepository()
        try await HTTPAPITests.app().application.test(.router) { client in
            try await client.execute(uri: "/openapi.json", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                #expect(Data(buffer: response.body) == expected, "rebuild: the binary carries docs/openapi.json as it was built")
            }
        }
    }

    /// Each documented operation, called with plausible values, reaches a handler: the answer
    /// is not the router's own 404 `not_found` (no such path) or 405.
    @Test func everyDocumentedOperationHasARoute() async throws {
        let document = try #require(try JSONSerialization.jsonObject(with: Self.documentInRepository()) as? [String: Any])
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        var operations: [(path: String, method: HTTPRequest.Method)] = []
        for (path, item) in paths where path != "/subscribe" {  // the upgrade: not the router's
            for key in item.keys {
                guard let method = HTTPRequest.Method(key.uppercased()), key != "parameters" else { continue }
                operations.append((path, method))
            }
        }
        #expect(operations.count == 14)
        // Changes before removals, the line's removal before the cart's: each call finds what it needs.
        operations.sort { ($0.method == .delete ? 1 : 0, -$0.path.count) < ($1.method == .delete ? 1 : 0, -$1.path.count) }
        let ordered = operations
        try await HTTPAPITests.app().application.test(.router) { client in
            // A cart with a line, so that reads and changes of it succeed.
            try await client.execute(
                uri: "/carts/c1/items", method: .post,
                body: ByteBuffer(string: #"{"sku":"s1","quantity":1,"unitPriceCents":1}"#)
            ) { #expect($0.status == .ok) }
            for (path, method) in ordered {
                let uri = path.replacingOccurrences(of: "{cartId}", with: "c1").replacingOccurrences(of: "{sku}", with: "s1")
                let body = method == .post ? #"{"sku":"s2","quantity":1,"unitPriceCents":1}"# : #"{"quantity":2}"#
                try await client.execute(uri: uri, method: method, body: ByteBuffer(string: body)) { response in
                    #expect(response.status != .methodNotAllowed, "\(method) \(path)")
                    #expect(HTTPAPITests.errorCode(response.body) != "not_found", "\(method) \(path)")
                    #expect(response.status.kind == .successful, "\(method) \(path): \(response.status)")
                }
            }
        }
    }
}

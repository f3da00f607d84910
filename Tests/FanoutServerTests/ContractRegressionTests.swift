import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import FanoutServer

/// Inputs that broke the documented contract, kept as tests.
@Suite("Contract regressions")
struct ContractRegressionTests {
    /// 150 characters written as 300 Unicode scalars (e + combining acute): over the 200 that
    /// the schema (maxLength) and the table's CHECK count. It was let through as 150 grapheme
    /// clusters, then the CHECK refused it: a 500. Now a 422, and nothing written.
    @Test func aNameOverTheLimitInScalarsIsRefusedNotAServerError() async throws {
        let name = String(repeating: "e\u{301}", count: 150)
        let body = try JSONSerialization.data(withJSONObject: ["sku": "a", "quantity": 1, "unitPriceCents": 1, "name": name])
        try await HTTPAPITests.app().application.test(.router) { client in
            try await client.execute(uri: "/carts/g/items", method: .post, body: ByteBuffer(bytes: body)) { response in
                #expect(response.status == .unprocessableContent)
                #expect(HTTPAPITests.errorCode(response.body) == "invalid_name")
            }
            let fits = String(repeating: "e\u{301}", count: 100)
            let ok = try JSONSerialization.data(withJSONObject: ["sku": "a", "quantity": 1, "unitPriceCents": 1, "name": fits])
            try await client.execute(uri: "/carts/g/items", method: .post, body: ByteBuffer(bytes: ok)) { #expect($0.status == .ok) }
        }
    }
}

import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FanoutServer

@Suite("405 Method Not Allowed")
struct MethodNotAllowedTests {
    @Test(arguments: [
        ("/carts", HTTPRequest.Method.put, "GET, HEAD"),
        ("/carts/alice", .post, "DELETE, GET, HEAD"),
        ("/carts/alice/items", .get, "POST"),
        ("/carts/alice/items/apple", .put, "DELETE, PATCH"),
        ("/metrics", .delete, "GET, HEAD"),
        ("/subscribe", .post, "GET, HEAD"),
        ("/", .trace, "GET, HEAD"),
        ("/", .post, "GET, HEAD"),
    ])
    func aKnownPathWithAnotherMethodAnswers405WithAllow(path: String, method: HTTPRequest.Method, allow: String) async throws {
        try await HTTPAPITests.app().application.test(.router) { client in
            try await client.execute(uri: path, method: method) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == allow)
                #expect(HTTPAPITests.errorCode(response.body) == "method_not_allowed")
            }
        }
    }

    @Test func anUnknownPathIsStill404() async throws {
        try await HTTPAPITests.app().application.test(.router) { client in
            for path in ["/nowhere", "/carts/alice/items/apple/more", "/carts/alice/things"] {
                try await client.execute(uri: path, method: .get) { response in
                    #expect(response.status == .notFound, "\(path)")
                    #expect(HTTPAPITests.errorCode(response.body) == "not_found")
                }
            }
        }
    }
}

import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FanoutServer

/// Every route, asked with every kind of credential and every spelling of its path, answers as
/// PROTOCOL.md's table says: the canonical path as its row, any other spelling 404 whatever the
/// credential. Operator pages once opened to any signed token through `/stats/` or `//metrics`.
@Suite("Route access")
struct RouteAccessTests {
    /// One cell of the documented table: a status, and for a refusal its error code.
    struct Outcome: Equatable, CustomStringConvertible {
        let status: Int
        let code: String?
        var description: String { code.map { "\(status) \($0)" } ?? "\(status)" }
    }

    /// One row: the method and path, and the outcome for each credential, in the table's order.
    struct Row {
        let method: HTTPRequest.Method
        let path: String
        let outcomes: [Outcome]
    }

    /// PROTOCOL.md's table "who may use which route", read from the document itself.
    static func documentedTable() throws -> [Row] {
        let protocolFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/PROTOCOL.md").standardized
        let text = try String(contentsOf: protocolFile, encoding: .utf8)
        let section = try #require(text.range(of: "### Paths, and who may use which route"))
        var rows: [Row] = []
        for line in text[section.upperBound...].split(separator: "\n") {
            if line.hasPrefix("## ") { break }
            guard line.hasPrefix("| `") else { continue }
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            let route = cells[0].split(separator: "`")[0].split(separator: " ")
            let outcomes = cells[1...].map { cell -> Outcome in
                let parts = cell.split(separator: " ", maxSplits: 1)
                return Outcome(status: Int(parts[0]) ?? -1, code: parts.count > 1 ? parts[1].trimmingCharacters(in: ["`"]) : nil)
            }
            rows.append(Row(method: HTTPRequest.Method(String(route[0]))!, path: String(route[1]), outcomes: outcomes))
        }
        return rows
    }

    /// The credentials of the table's columns, in its order.
    static func credentials() async throws -> [HTTPFields] {
        [
            [:],
            SignedTokenHTTPTests.bearer(SignedTokenHTTPTests.operatorToken),
            SignedTokenHTTPTests.bearer(try await Tokens.hs256("alice", carts: ["alice"])),
            SignedTokenHTTPTests.bearer(try await Tokens.hs256("writer", carts: [], scope: "write")),
        ]
    }

    /// Other spellings of `path` that an HTTP router or a proxy might take for it.
    static func variants(of path: String) -> [String] {
        let segments = path.split(separator: "/").map(String.init)
        var variants = [path + "/", "/" + path, path + "//", "/." + path, path + "/.", "/x/.." + path]
        if path == "/" {
            variants = ["//", "/.", "/./", "/x/..", "/%2F"]
        } else {
            let first = segments[0]
            let encoded = String(format: "%%%02X", first.utf8.first!) + first.dropFirst()
            variants.append("/" + ([encoded] + segments.dropFirst()).joined(separator: "/"))
            if segments.count > 1 {
                variants.append("/" + segments.joined(separator: "//"))
                variants.append("/" + segments[0] + "/./" + segments.dropFirst().joined(separator: "/"))
            }
        }
        return variants
    }

    static func body(for method: HTTPRequest.Method, path: String) -> ByteBuffer? {
        switch method {
        case .post: ByteBuffer(string: #"{"sku":"apple","quantity":1,"unitPriceCents":50}"#)
        case .patch: ByteBuffer(string: #"{"quantity":2}"#)
        default: nil
        }
    }

    static func outcome(of response: TestResponse) -> Outcome {
        Outcome(status: Int(response.status.code), code: response.status.code >= 400 ? HTTPAPITests.errorCode(response.body) : nil)
    }

    @Test func everyRouteWithEveryCredentialAndSpellingAnswersAsDocumented() async throws {
        let table = try Self.documentedTable()
        #expect(table.count >= 15, "PROTOCOL.md's table was not found whole")
        let credentials = try await Self.credentials()
        let operatorHeaders = credentials[1]
        try await SignedTokenHTTPTests.app().application.test(.router) { client in
            for row in table {
                #expect(row.outcomes.count == credentials.count, "\(row.method) \(row.path): one outcome per credential")
                for (headers, expected) in zip(credentials, row.outcomes) {
                    for (path, want) in [(row.path, expected)]
                        + Self.variants(of: row.path).map({ ($0, Outcome(status: 404, code: "not_found")) })
                    {
                        // Each change finds the cart and its line as the table assumes.
                        try await client.execute(
                            uri: "/carts/alice/items", method: .post, headers: operatorHeaders,
                            body: Self.body(for: .post, path: "")
                        ) { #expect($0.status == .ok) }
                        try await client.execute(
                            uri: path, method: row.method, headers: headers, body: Self.body(for: row.method, path: path)
                        ) {
                            let got = Self.outcome(of: $0)
                            #expect(got == want, "\(row.method) \(path) with \(headers[.authorization]?.prefix(20) ?? "no credential")")
                        }
                    }
                }
            }
        }
    }

    @Test func theCanonicalRuleNamesWhatIsWrong() {
        #expect(CanonicalPath.problem("/") == nil)
        #expect(CanonicalPath.problem("/carts/alice/items/apple") == nil)
        #expect(CanonicalPath.problem("/carts/a.b_c-d") == nil)
        // Encodings of what needs one reach the route, which refuses the id itself (422).
        #expect(CanonicalPath.problem("/carts/%C3%97/items") == nil)
        #expect(CanonicalPath.problem("/carts/%2F") == nil)
        #expect(CanonicalPath.problem("/carts/100%") == nil)
        for path in [
            "/stats/", "//stats", "/stats//x", "/./stats", "/a/../stats", "/%73tats", "/carts/%61lice", "/carts/al%2eice", "/carts/a%7E",
            "stats", "", "/carts/alice/.",
        ] {
            #expect(CanonicalPath.problem(path) != nil, "\(path)")
        }
    }

    /// Over a real connection too, where the request line is parsed before routing.
    @Test func aPathVariantOverTheWireIsNotFoundForASignedToken() async throws {
        let user = try await Tokens.hs256("writer", carts: [], scope: "write")
        try await withServer({
            $0.token = SignedTokenHTTPTests.operatorToken
            $0.jwtSecret = Tokens.secret
        }) { port, _ in
            for path in ["/stats", "/stats/", "//stats", "/metrics/", "//metrics", "/stats//"] {
                let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(user)\r\nConnection: close\r\n\r\n"
                let answer = try await RawHTTP.exchange(port: port, Array(request.utf8))
                #expect(answer.status == (path == "/stats" ? 403 : 404), "\(path)")
                #expect(
                    !answer.text.contains("liveSubscribers") && !answer.text.contains("# TYPE"), "\(path) leaked the operator's figures")
            }
        }
    }
}

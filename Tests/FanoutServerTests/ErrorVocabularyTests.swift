import FanoutProtocol
import Foundation
import Testing

/// One list of error codes (`FanoutErrorCode`): the OpenAPI document and docs/PROTOCOL.md name
/// the same codes, and PROTOCOL.md's status table puts each under the status the server sends.
@Suite("Error vocabulary")
struct ErrorVocabularyTests {
    static let all = Set(FanoutErrorCode.allCases.map(\.rawValue))

    @Test func theOpenAPIDocumentListsEveryCodeAndNoOther() throws {
        let document = try #require(try JSONSerialization.jsonObject(with: OpenAPIDocumentTests.documentInRepository()) as? [String: Any])
        let schemas = (document["components"] as? [String: Any])?["schemas"] as? [String: Any]
        let error = ((schemas?["Error"] as? [String: Any])?["properties"] as? [String: Any])?["error"] as? [String: Any]
        let code = (error?["properties"] as? [String: Any])?["code"] as? [String: Any]
        let listed = try #require(code?["enum"] as? [String], "Error.error.code has an enum")
        #expect(
            Set(listed) == Self.all, "in the document only: \(Set(listed).subtracting(Self.all)); missing: \(Self.all.subtracting(listed))")
        #expect(listed.count == Set(listed).count, "a code listed twice")
    }

    @Test func protocolMDNamesEveryCodeAndItsStatus() throws {
        let text = try String(contentsOf: OpenAPIDocumentTests.repository.appending(path: "docs/PROTOCOL.md"), encoding: .utf8)
        let named = Set(text.matches(of: /`([a-z]+(?:_[a-z]+)*)`/).map { String($0.output.1) })
        #expect(Self.all.subtracting(named).isEmpty, "codes PROTOCOL.md never names: \(Self.all.subtracting(named).sorted())")
        // The status table: `| 404 | `cart_not_found`, … |` (a row may name two statuses).
        var tabled: Set<String> = []
        for line in text.split(separator: "\n") where line.wholeMatch(of: /\| [1-5]\d\d( \/ [1-5]\d\d)? \|.*/) != nil {
            let cells = line.split(separator: "|", omittingEmptySubsequences: true)
            let statuses = Set(cells[0].split(separator: "/").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) })
            for match in cells[1].matches(of: /`([a-z]+(?:_[a-z]+)*)`/) {
                let name = String(match.output.1)
                guard let code = FanoutErrorCode(rawValue: name) else {
                    Issue.record("PROTOCOL.md's table names `\(name)`, which is no FanoutErrorCode")
                    continue
                }
                tabled.insert(name)
                #expect(
                    code.httpStatus.map(statuses.contains) == true,
                    "`\(name)` is under \(statuses.sorted()) in PROTOCOL.md, sent as \(code.httpStatus.map(String.init) ?? "no HTTP status")"
                )
            }
        }
        // Every code with an HTTP status is in the table (the store's start-up ones aside).
        let startUp: Set<FanoutErrorCode> = [.schemaTooNew, .databaseInUse, .notAFanoutDatabase]
        let untabled = FanoutErrorCode.allCases.filter { $0.httpStatus != nil && !startUp.contains($0) && !tabled.contains($0.rawValue) }
        #expect(untabled.isEmpty, "codes with an HTTP status missing from PROTOCOL.md's table: \(untabled.map(\.rawValue))")
    }
}

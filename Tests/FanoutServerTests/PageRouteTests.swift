import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FanoutServer

/// `GET /` serves the live cart page as it is in the repository, from the binary. (What the page
/// does in a browser is EndToEndTests' PageTests, in a headless Chromium.)
@Suite("The page's route")
struct PageRouteTests {
    @Test func theServerServesThePageInTheRepositoryWithoutAToken() async throws {
        let expected = try Data(contentsOf: OpenAPIDocumentTests.repository.appending(path: "Sources/FanoutServer/Page/index.html"))
        let app = try await HTTPAPITests.app { $0.token = "s3cret" }
        try await app.application.test(.router) { client in
            try await client.execute(uri: "/", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "text/html; charset=utf-8")
                #expect(Data(buffer: response.body) == expected, "rebuild: the binary carries the page as it was built")
                // Nothing but this server: no script or style from elsewhere would run.
                let policy = response.headers[.contentSecurityPolicy] ?? ""
                #expect(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "\(policy)")
                // Scripts from this server only: no inline script runs, whatever a page shows.
                #expect(policy.contains("script-src 'self';"), "\(policy)")
                #expect(!policy.contains("script-src 'unsafe-inline'"), "\(policy)")
                #expect(!String(decoding: Data(buffer: response.body), as: UTF8.self).contains("<script>"), "no inline script")
            }
            try await client.execute(uri: "/page.js", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "text/javascript; charset=utf-8")
                let script = try Data(contentsOf: OpenAPIDocumentTests.repository.appending(path: "Sources/FanoutServer/Page/page.js"))
                #expect(Data(buffer: response.body) == script)
            }
        }
    }
}

import Foundation
import HTTPTypes
import Hummingbird

/// `GET /`: the live cart page, `Page/index.html` as it was when the binary was built (a
/// resource embedded in code, as the OpenAPI document is).
///
/// The page holds no data, so it needs no token: it reads the carts through `/subscribe` and
/// changes them through the API, with the token given in its own URL (`/?token=T`).
struct PageController: Sendable {
    /// The page's bytes, and its script's.
    static let page = ByteBuffer(bytes: PackageResources.index_html)
    static let script = ByteBuffer(bytes: PackageResources.page_js)
    static let scriptPath = "/page.js"

    /// The page's script comes from this server alone (no inline script runs), its styles are
    /// inline, and it talks only to this server: the policy forbids everything else, so nothing
    /// is fetched from elsewhere and nothing it shows can run as code. `no-referrer` keeps a
    /// `?token=` in the page's URL from travelling on.
    static let headers: HTTPFields = [
        .contentType: "text/html; charset=utf-8",
        .cacheControl: "no-cache",
        .contentSecurityPolicy: "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
            + "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        .referrerPolicy: "no-referrer",
        .xContentTypeOptions: "nosniff",
    ]

    static let scriptHeaders: HTTPFields = [
        .contentType: "text/javascript; charset=utf-8",
        .cacheControl: "no-cache",
        .xContentTypeOptions: "nosniff",
    ]

    func addRoutes(to router: RouterGroup<FanoutRequestContext>) {
        router.get("/") { _, _ in
            Response(status: .ok, headers: Self.headers, body: .init(byteBuffer: Self.page))
        }
        router.get(RouterPath(Self.scriptPath)) { _, _ in
            Response(status: .ok, headers: Self.scriptHeaders, body: .init(byteBuffer: Self.script))
        }
    }
}

extension HTTPField.Name {
    static let referrerPolicy = Self("Referrer-Policy")!
}

import Foundation
import HTTPTypes
import Hummingbird

/// `GET /`: the live cart page, `Page/index.html` as it was when the binary was built (the
/// `EmbedServedFiles` plugin carries it in, as it does the OpenAPI document).
///
/// The page holds no data, so it needs no token: it reads the carts through `/subscribe` and
/// changes them through the API, with the token given in its own URL (`/?token=T`).
struct PageController: Sendable {
    /// The page's bytes, decoded once.
    static let page = ByteBuffer(bytes: Data(base64Encoded: embeddedPage) ?? Data())

    /// The page's script and styles are inline and it talks only to this server: the policy
    /// forbids everything else, so nothing is fetched from elsewhere and nothing it shows can
    /// run as code. `no-referrer` keeps a `?token=` in the page's URL from travelling on.
    static let headers: HTTPFields = [
        .contentType: "text/html; charset=utf-8",
        .cacheControl: "no-cache",
        .contentSecurityPolicy: "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            + "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        .referrerPolicy: "no-referrer",
        .xContentTypeOptions: "nosniff",
    ]

    func addRoutes(to router: Router<FanoutRequestContext>) {
        router.get("/") { _, _ in
            Response(status: .ok, headers: Self.headers, body: .init(byteBuffer: Self.page))
        }
    }
}

extension HTTPField.Name {
    static let referrerPolicy = Self("Referrer-Policy")!
}

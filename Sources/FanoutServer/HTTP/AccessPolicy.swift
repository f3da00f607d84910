import Foundation
import Hummingbird

/// Who may use the server: the bearer token and the browser origins allowed.
///
/// A web page open in the user's browser can reach a server on localhost; the `Origin` check
/// stops it from reading carts over a WebSocket or changing them with a request. Clients that
/// are not browsers send no `Origin`, or a `ws://` one, and are not affected.
struct AccessPolicy: Sendable {
    let token: String?
    let allowedOrigins: Set<String>

    /// Throws 403 for a browser origin not on the allow-list, and 401 when a token is required
    /// and missing or wrong. The token comes as `Authorization: Bearer T`; `?token=T` only for
    /// reads and subscriptions, which browsers open with APIs that cannot set headers
    /// (WebSocket, EventSource), never for changes.
    func check(_ request: Request, requiresToken: Bool) throws {
        for origin in request.headers[values: .origin] where !isAllowed(origin: origin) && !Self.isSameOrigin(origin, as: request) {
            throw APIError(.originNotAllowed, "origin \(origin.prefix(100)) is not allowed (see --allow-origin)")
        }
        guard requiresToken, let token else { return }
        let queryTokenAllowed = request.method == .get || request.method == .head
        let offered =
            Self.bearer(request.headers[.authorization])
            ?? (queryTokenAllowed ? request.uri.queryParameters.get("token") : nil)
        guard let offered else {
            throw APIError(.unauthorized, "a token is required: Authorization: Bearer <token>")
        }
        guard Self.constantTimeEqual(offered, token) else {
            throw APIError(.badToken, "the token is not valid")
        }
    }

    /// Web pages send their `http(s)://` origin (or `null`); those must be on the list.
    /// Non-browser WebSocket clients may send their own `ws(s)://` URL, which no page can.
    func isAllowed(origin: String) -> Bool {
        if allowedOrigins.contains(origin) { return true }
        let lowercased = origin.lowercased()
        return lowercased.hasPrefix("ws://") || lowercased.hasPrefix("wss://")
    }

    /// Whether a browser `Origin` is this server's own, `http://` and the request's `Host`: the
    /// page at `/` changing carts (a browser names the origin on a POST, PATCH or DELETE even to
    /// its own server). `HostPolicy` has already refused a `Host` the server does not answer to,
    /// so a page on another name that resolves here (DNS rebinding) is not its own origin.
    static func isSameOrigin(_ origin: String, as request: Request) -> Bool {
        guard let host = request.head.authority else { return false }
        return origin.lowercased() == "http://" + host.lowercased()
    }

    static func bearer(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
    }

    /// Compares without returning early, so timing does not reveal how much of a guess matched.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }
}

/// Applies the access policy to every HTTP request: origins always, the token everywhere but
/// `/healthz`, `/openapi.json` and the page at `/`, which say nothing of the carts (reads expose
/// the same carts as `/events` and `/subscribe`, so they need it too; the page reads them with
/// the token given in its URL).
struct AccessMiddleware<Context: RequestContext>: RouterMiddleware {
    static var openPaths: Set<String> { ["/", PageController.scriptPath, "/healthz", "/openapi.json"] }

    let policy: AccessPolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try policy.check(request, requiresToken: !Self.openPaths.contains(request.uri.path))
        return try await next(request, context)
    }
}

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

    /// Throws 403 for a browser origin not on the allow-list, and 401/403 when a token is
    /// required and missing or wrong.
    ///
    /// The token comes as `Authorization: Bearer T`, or, for GET and HEAD only (reads and
    /// WebSocket upgrades), as `?token=T`: a browser's WebSocket API and `EventSource` cannot set
    /// headers. A mutation must send the header, so a token never rides in the URL of a change
    /// (URLs end up in logs, history and `Referer`).
    func check(_ request: Request, requiresToken: Bool) throws {
        for origin in request.headers[values: .origin] where !isAllowed(origin: origin) {
            throw APIError(.forbidden, code: "origin_not_allowed", "origin \(origin.prefix(100)) is not allowed (see --allow-origin)")
        }
        guard requiresToken, let token else { return }
        let acceptsQueryToken = request.method == .get || request.method == .head
        let queryToken = request.uri.queryParameters.get("token")
        guard let offered = Self.bearer(request.headers[.authorization]) ?? (acceptsQueryToken ? queryToken : nil) else {
            let hint = queryToken == nil ? "" : " (?token= is accepted only for reads and WebSocket upgrades)"
            throw APIError(.unauthorized, code: "unauthorized", "a token is required: Authorization: Bearer <token>\(hint)")
        }
        guard Self.constantTimeEqual(offered, token) else {
            throw APIError(.forbidden, code: "bad_token", "the token is not valid")
        }
    }

    /// Web pages send their `http(s)://` origin (or `null`); those must be on the list.
    /// Non-browser WebSocket clients may send their own `ws(s)://` URL, which no page can.
    func isAllowed(origin: String) -> Bool {
        if allowedOrigins.contains(origin) { return true }
        let lowercased = origin.lowercased()
        return lowercased.hasPrefix("ws://") || lowercased.hasPrefix("wss://")
    }

    static func bearer(_ header: String?) -> String? {
        guard let header, header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
    }

    /// Compares without returning early, so timing does not reveal how much of a guess matched.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8), b = Array(b.utf8)
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }
}

/// Applies the access policy to every HTTP request: origins always, and the token on all but
/// `GET /healthz`: carts, the event log and the figures of `/stats` are the user's data.
struct AccessMiddleware<Context: RequestContext>: RouterMiddleware {
    let policy: AccessPolicy

    /// The one path open without a token, so a load balancer or a supervisor can probe.
    static var openPath: String { "/healthz" }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try policy.check(request, requiresToken: request.uri.path != Self.openPath)
        return try await next(request, context)
    }
}

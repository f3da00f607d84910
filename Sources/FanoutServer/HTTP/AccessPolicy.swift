import FanoutProtocol
import Foundation
import Hummingbird

/// Who may use the server, and for what: the browser origins allowed, the operator's
/// `--token`, and the signed tokens of end users (`TokenKeys`).
///
/// A web page open in the user's browser can reach a server on localhost; the `Origin` check
/// stops it from reading carts over a WebSocket or changing them with a request. Clients that
/// are not browsers send no `Origin`, or a `ws://` one, and are not affected.
///
/// A credential comes as `Authorization: Bearer T`; `?token=T` only for reads and subscriptions,
/// which browsers open with APIs that cannot set headers (WebSocket, EventSource), never for
/// changes. It is the operator's token (everything) or a signed one (its `Grant`); with neither
/// configured the server asks for none, as on a developer's machine.
struct AccessPolicy: Sendable {
    /// What a route asks of a credential.
    enum Need: Sendable {
        /// Nothing: the page, `/healthz`, `/openapi.json` hold no carts.
        case nothing
        /// Any valid credential; what it may do with which cart is its `Grant`'s.
        case credential
        /// The operator's `--token`: `/stats` and `/metrics`.
        case operatorToken
    }

    let token: String?
    let tokenKeys: TokenKeys?
    let allowedOrigins: Set<String>

    /// Whether any credential is asked for at all.
    var asksForCredentials: Bool { token != nil || tokenKeys != nil }

    /// A request's credential, as far as it can be told at once.
    enum Credential: Sendable {
        /// Decided: the operator's token, or none needed.
        case granted(Grant)
        /// A signed token, to be verified (`verify(_:needs:)`).
        case signed(String)
    }

    /// What `request` may do, for a route that needs `need` (its origin was checked already, once
    /// per request: `OriginMiddleware`, `SubscribeEndpoint`). Throws 401 `unauthorized` without a credential, 401 `invalid_token` for a
    /// signed token that does not verify (403 `bad_token` for a wrong one where only the
    /// operator's is configured), and 403 `insufficient_scope` for a signed token on an
    /// operator's route.
    func grant(for request: Request, needs need: Need) async throws -> Grant {
        switch try credential(for: request, needs: need) {
        case .granted(let grant): grant
        case .signed(let token): try await verify(token, needs: need)
        }
    }

    /// The part of `grant(for:needs:)` that needs no verification, on whatever thread asks (an
    /// event loop, for a subscription): whether there is a credential, and whether it is the
    /// operator's.
    func credential(for request: Request, needs need: Need) throws -> Credential {
        guard need != .nothing else { return .granted(.nothing) }
        guard asksForCredentials else { return .granted(.operator) }
        let queryTokenAllowed = request.method == .get || request.method == .head
        let offered =
            Self.bearer(request.headers[.authorization])
            ?? (queryTokenAllowed ? request.uri.queryParameters.get("token") : nil)
        guard let offered else {
            throw APIError(.unauthorized, "a token is required: Authorization: Bearer <token>")
        }
        if let token, Self.constantTimeEqual(offered, token) { return .granted(.operator) }
        guard tokenKeys != nil else { throw APIError(.badToken, "the token is not valid") }
        return .signed(offered)
    }

    /// What a signed token allows, verified (by jwt-kit's key collection, an actor: off the
    /// event loop); throws the `APIError` to answer.
    func verify(_ token: String, needs need: Need) async throws -> Grant {
        guard let tokenKeys else { throw APIError(.badToken, "the token is not valid") }
        do {
            let grant = try await tokenKeys.grant(for: token)
            if need == .operatorToken {
                throw FanoutError(.insufficientScope, "only the operator's --token reads /stats and /metrics")
            }
            return grant
        } catch let error as FanoutError {
            throw APIError(error)
        }
    }

    /// Throws 403 `origin_not_allowed` for a browser origin that is neither on the allow-list nor
    /// the server's own.
    func checkOrigin(of request: Request) throws {
        for origin in request.headers[values: .origin] where !isAllowed(origin: origin) && !Self.isSameOrigin(origin, as: request) {
            throw APIError(.originNotAllowed, "origin \(origin.prefix(100)) is not allowed (see --allow-origin)")
        }
    }

    /// Web pages send their `http(s)://` origin (or `null`); those must be on the list.
    /// Non-browser WebSocket clients may send their own `ws(s)://` URL, which no page can.
    func isAllowed(origin: String) -> Bool {
        if allowedOrigins.contains(origin) { return true }
        let lowercased = origin.lowercased()
        return lowercased.hasPrefix("ws://") || lowercased.hasPrefix("wss://")
    }

    /// Whether a browser `Origin` is this server's own (its page at `/` changing carts: a
    /// browser names the origin on a POST, PATCH or DELETE even to its own server): the
    /// request's `Host` with `https`, or with `http` for a request that came in the clear (a page
    /// served over TLS by a proxy in front reaches the server in the clear with its `https`
    /// origin; a server with TLS never takes an `http` page as its own). `HostPolicy` has already refused a `Host` the server does not answer to,
    /// so a page on another name that resolves here (DNS rebinding) is not its own origin.
    static func isSameOrigin(_ origin: String, as request: Request) -> Bool {
        guard let host = request.head.authority?.lowercased() else { return false }
        let origin = origin.lowercased()
        return origin == "https://" + host || (request.head.scheme != "https" && origin == "http://" + host)
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

/// Refuses a browser origin that is not allowed, on every request: routed, not found, or of a
/// method no route takes (a preflight from another origin is 403, not 405).
struct OriginMiddleware: RouterMiddleware {
    typealias Context = FanoutRequestContext

    let policy: AccessPolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try policy.checkOrigin(of: request)
        return try await next(request, context)
    }
}

/// Applies the access policy to the requests of the routes it is added to, and hands their
/// handlers its `Grant`: the need is declared with the route (`AccessGroups`), so however a
/// path is spelled, the route the router finds brings its own need with it.
struct AccessMiddleware: RouterMiddleware {
    typealias Context = FanoutRequestContext

    let policy: AccessPolicy
    let need: AccessPolicy.Need

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.grant = try await policy.grant(for: request, needs: need)
        return try await next(request, context)
    }
}

/// The router's routes by what they ask of a credential, each group with its `AccessMiddleware`:
/// a route is added to the group of its need, and has no other way in.
///
/// - `open`: the page at `/` and its script, `/healthz`, `/openapi.json` (they say nothing of
///   the carts; origins are still checked).
/// - `users`: every cart route, `/events` and `/subscribe` (any credential; what it may do with
///   which cart is its `Grant`'s).
/// - `operators`: `/stats` and `/metrics` (the operator's `--token` only).
struct AccessGroups {
    let open: RouterGroup<FanoutRequestContext>
    let users: RouterGroup<FanoutRequestContext>
    let operators: RouterGroup<FanoutRequestContext>

    init(router: Router<FanoutRequestContext>, policy: AccessPolicy) {
        open = router.group().add(middleware: AccessMiddleware(policy: policy, need: .nothing))
        users = router.group().add(middleware: AccessMiddleware(policy: policy, need: .credential))
        operators = router.group().add(middleware: AccessMiddleware(policy: policy, need: .operatorToken))
    }
}

import Hummingbird

/// Which `Host` names the server answers to: the guard against DNS rebinding.
///
/// A page on a domain its owner can point at 127.0.0.1 is same-origin with the local server as
/// far as the browser knows, so the `Origin` check alone cannot stop it reading carts; the `Host`
/// header still names the attacker's domain. When the server listens on loopback it answers only
/// loopback names (`localhost`, `*.localhost`, `127.x.x.x`, `[::1]`) and the names given with
/// `--allow-host`; anything else gets 421. Listening elsewhere, clients reach it by names the
/// server cannot know, so only `--allow-host` (when given) restricts them.
struct HostPolicy: Sendable {
    /// Lowercased names, without port.
    let allowedHosts: Set<String>
    let loopbackOnly: Bool

    init(listeningOn host: String, allowedHosts: Set<String>) {
        self.allowedHosts = Set(allowedHosts.map { $0.lowercased() })
        self.loopbackOnly = Self.isLoopback(host.lowercased())
    }

    private var enforced: Bool { loopbackOnly || !allowedHosts.isEmpty }

    /// Throws 421 `host_not_allowed` for a `Host` the server does not answer to. A request
    /// without one (HTTP/1.0) passes: browsers always send it.
    func check(_ request: Request) throws {
        guard enforced, let header = request.head.authority else { return }
        let name = Self.name(of: header)
        if allowedHosts.contains(name) || (loopbackOnly && Self.isLoopback(name)) { return }
        throw APIError(.hostNotAllowed, "this server does not answer to Host \(header.prefix(100)) (see --allow-host)")
    }

    /// The host name of a `Host` header value, lowercased, without its port.
    static func name(of header: String) -> String {
        let value = header.lowercased()
        if value.hasPrefix("[") {
            return String(value.prefix { $0 != "]" }) + "]"
        }
        return String(value.prefix { $0 != ":" })
    }

    static func isLoopback(_ name: String) -> Bool {
        if name == "localhost" || name.hasSuffix(".localhost") || name == "[::1]" || name == "::1" { return true }
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}

/// Applies the `HostPolicy` to every HTTP request.
struct HostMiddleware<Context: RequestContext>: RouterMiddleware {
    let policy: HostPolicy

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try policy.check(request)
        return try await next(request, context)
    }
}

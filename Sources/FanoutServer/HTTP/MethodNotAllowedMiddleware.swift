import Hummingbird

/// Answers 405 with `Allow` when a request's path exists but not for its method (RFC 9110
/// §15.5.6): Hummingbird's router answers 404 to every miss, which tells a client the resource
/// is not there when only the method is wrong.
///
/// Added after the last route, so it wraps the router's not-found responder and nothing else.
/// HEAD never reaches it: it is served as GET before routing.
struct MethodNotAllowedMiddleware<Context: RequestContext>: RouterMiddleware {
    private let routes: [(path: RouterPath, methods: [HTTPRequest.Method])]

    /// - Parameter routes: every path and method served (`Router.routes`, and what is served
    ///   outside the router, like `/subscribe`).
    init(routes: [(path: RouterPath, method: HTTPRequest.Method)]) {
        var grouped: [String: (path: RouterPath, methods: [HTTPRequest.Method])] = [:]
        for route in routes { grouped[route.path.description, default: (route.path, [])].methods.append(route.method) }
        // HEAD is served wherever GET is (`FanoutChannel.servingHeadAsGet`).
        for (key, route) in grouped where route.methods.contains(.get) { grouped[key]?.methods.append(.head) }
        self.routes = grouped.values.sorted { $0.path.description < $1.path.description }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = methods(at: request.uri.path)
            guard !allowed.isEmpty, !allowed.contains(request.method) else { throw error }
            let allow = allowed.map(\.rawValue).sorted().joined(separator: ", ")
            let body = try APIError(.methodNotAllowed, "\(request.method) is not served here; use \(allow)").body()
            return Response(
                status: .methodNotAllowed,
                headers: [.contentType: APIError.contentType, .allow: allow],
                body: .init(byteBuffer: body))
        }
    }

    /// The methods served at `path`, by any route whose pattern it matches.
    private func methods(at path: String) -> [HTTPRequest.Method] {
        // "/a/b" is ["a", "b"]; "/" is no segment at all, like the root route's pattern.
        let segments = path == "/" ? [] : path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        return routes.flatMap { route -> [HTTPRequest.Method] in
            let components = route.path.components
            guard components.count == segments.count,
                zip(components, segments).allSatisfy({ component, segment in !segment.isEmpty && component ~= segment })
            else { return [] }
            return route.methods
        }
    }
}

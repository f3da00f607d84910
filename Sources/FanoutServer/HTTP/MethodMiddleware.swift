import Hummingbird
import NIOConcurrencyHelpers

/// 405 with `Allow` for a known path asked with a method it does not take (the router alone
/// answers 404). HEAD is served as GET before routing (`FanoutChannel.servingHeadAsGet`).
struct MethodMiddleware<Context: RequestContext>: RouterMiddleware {
    let routes: RouteTable

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let allowed = routes.methods(for: request.uri.path)
            guard !allowed.isEmpty else { throw error }
            let refusal = APIError(
                .methodNotAllowed, code: "method_not_allowed",
                "\(request.uri.path.prefix(100)) takes \(allowed.joined(separator: ", ")), not \(request.method)")
            var response = try refusal.response(from: request, context: context)
            response.headers[.allow] = allowed.joined(separator: ", ")
            return response
        }
    }
}

/// The router's routes as path patterns and their methods, filled once the routes are added
/// (the middleware must exist before them, to apply to them).
final class RouteTable: Sendable {
    private struct Route {
        /// Literal segments, or nil for a parameter.
        let segments: [Substring?]
        let methods: [String]
    }

    private let routes = NIOLockedValueBox<[Route]>([])

    func load<Context>(from router: Router<Context>) {
        let byPath = Dictionary(grouping: router.routes, by: { $0.path.description })
        routes.withLockedValue { routes in
            routes = byPath.map { path, descriptions in
                var methods = Set(descriptions.map(\.method.rawValue))
                if methods.contains("GET") { methods.insert("HEAD") }
                let segments = path.split(separator: "/").map { $0.hasPrefix(":") || $0.hasPrefix("{") || $0.hasPrefix("*") ? nil : $0 }
                return Route(segments: segments, methods: methods.sorted())
            }
        }
    }

    /// The methods routed for `path`; empty for a path no route has.
    func methods(for path: String) -> [String] {
        let segments = path.split(separator: "/")
        return routes.withLockedValue { routes in
            routes.first { route in
                route.segments.count == segments.count
                    && zip(route.segments, segments).allSatisfy { pattern, segment in pattern.map { $0 == segment } ?? true }
            }?.methods ?? []
        }
    }
}

import Hummingbird

/// CORS for the browser origins given with `--allow-origin`, so that a web app there can read
/// the answers and send JSON: `Access-Control-Allow-Origin` on every answer (errors included),
/// and preflight `OPTIONS` answered with the methods and headers the API takes.
///
/// Requests from other origins pass through untouched, to be refused by `OriginMiddleware`
/// (403), preflights included. It sits outside `ErrorMiddleware`, so the errors it sees are
/// already the API's.
struct CrossOriginMiddleware<Context: RequestContext>: RouterMiddleware {
    let allowedOrigins: Set<String>

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let origin = request.headers[.origin], allowedOrigins.contains(origin) else {
            return try await next(request, context)
        }
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            var response = Response(status: .noContent)
            response.headers[.accessControlAllowMethods] = "GET, HEAD, POST, PATCH, DELETE"
            response.headers[.accessControlAllowHeaders] = "Authorization, Content-Type, If-Match, Idempotency-Key"
            response.headers[.accessControlMaxAge] = "600"
            return Self.allowing(origin, response)
        }
        do {
            return Self.allowing(origin, try await next(request, context))
        } catch let error as any HTTPResponseError {
            return Self.allowing(origin, try error.response(from: request, context: context))
        }
    }

    private static func allowing(_ origin: String, _ response: Response) -> Response {
        var response = response
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.accessControlExposeHeaders] = "ETag, Idempotent-Replayed"
        response.headers[values: .vary].append("Origin")
        return response
    }
}

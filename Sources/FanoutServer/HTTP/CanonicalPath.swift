import FanoutProtocol
import Hummingbird

/// The one spelling of a path the server answers: `/` and segments joined by single slashes, no
/// empty segment (so no `//` and no trailing `/`), no `.` or `..` segment, and no
/// percent-encoding (no route, cart id or sku holds a character that needs it).
///
/// Hummingbird's router skips empty segments, so `/stats/` and `//stats` would reach `/stats`;
/// any other spelling is refused before routing decides anything, whatever the credential, so
/// that what a path reaches never depends on how it was written.
enum CanonicalPath {
    /// Why `path` is not canonical, or nil when it is.
    static func problem(_ path: String) -> String? {
        guard path.utf8.first == UInt8(ascii: "/") else { return "a path starts with /" }
        if path == "/" { return nil }
        if path.utf8.contains(UInt8(ascii: "%")) { return "paths carry no percent-encoding" }
        for segment in path.utf8.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            if segment.isEmpty { return "paths have no empty segment (no // and no trailing /)" }
            if segment.elementsEqual(".".utf8) || segment.elementsEqual("..".utf8) { return "paths have no . or .. segment" }
        }
        return nil
    }

    /// The `404 not_found` answer to a path that is not canonical.
    static func refusal(of path: String, because problem: String) -> APIError {
        APIError(.notFound, "no resource at \(path.prefix(100)): \(problem)")
    }
}

/// Refuses every request whose path is not canonical (`CanonicalPath`) with 404 `not_found`,
/// before any route's own middleware (access first of all) sees it.
struct CanonicalPathMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        if let problem = CanonicalPath.problem(path) { throw CanonicalPath.refusal(of: path, because: problem) }
        return try await next(request, context)
    }
}

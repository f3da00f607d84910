import FanoutProtocol
import Hummingbird

/// The one spelling of a path the server answers: `/` and segments joined by single slashes, no
/// empty segment (so no `//` and no trailing `/`), no `.` or `..` segment, and no
/// percent-encoding of a character that needs none (letters, digits, `-._~`: RFC 3986 §6.2.2.2
/// says such a path is the same as the one with the character itself). Other percent-encodings
/// pass through to the route, which refuses what it cannot take (`invalid_cart_id`, say).
///
/// Hummingbird's router skips empty segments, so `/stats/` and `//stats` would reach `/stats`;
/// any other spelling is refused before routing decides anything, whatever the credential, so
/// that what a path reaches never depends on how it was written.
enum CanonicalPath {
    /// Why `path` is not canonical, or nil when it is.
    static func problem(_ path: String) -> String? {
        guard path.utf8.first == UInt8(ascii: "/") else { return "a path starts with /" }
        if path == "/" { return nil }
        if encodesAnUnreservedCharacter(path) { return "letters, digits and -._~ are not percent-encoded" }
        for segment in path.utf8.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            if segment.isEmpty { return "paths have no empty segment (no // and no trailing /)" }
            if segment.elementsEqual(".".utf8) || segment.elementsEqual("..".utf8) { return "paths have no . or .. segment" }
        }
        return nil
    }

    /// Whether `path` holds a `%XX` that stands for a letter, a digit, or one of `-._~`.
    static func encodesAnUnreservedCharacter(_ path: String) -> Bool {
        let bytes = Array(path.utf8)
        var index = bytes.startIndex
        while let percent = bytes[index...].firstIndex(of: UInt8(ascii: "%")) {
            index = percent + 1
            guard percent + 2 < bytes.count, let high = hexValue(bytes[percent + 1]), let low = hexValue(bytes[percent + 2]) else {
                continue
            }
            switch high << 4 | low {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                return true
            default:
                continue
            }
        }
        return false
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
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

import FanoutProtocol
import Foundation
import Hummingbird

/// The request context of the HTTP API: a small body limit, the product's JSON coding, and what
/// the request's credential may do.
struct FanoutRequestContext: RequestContext {
    /// Cart requests are tiny; anything larger is refused with 413 before it is read whole.
    static let maxBodySize = 64 * 1024

    var coreContext: CoreRequestContextStorage
    /// Set by `AccessMiddleware` from the request's credential; nothing until then.
    var grant = Grant.nothing

    init(source: Source) {
        coreContext = .init(source: source)
    }

    var maxUploadSize: Int { Self.maxBodySize }
    var requestDecoder: JSONDecoder { Self.decoder }
    var responseEncoder: JSONEncoder { Self.encoder }

    /// One of each for every request (they hold only their settings).
    static let decoder = FanoutJSON.decoder()
    static let encoder = FanoutJSON.encoder()
}

extension Request {
    /// Decodes the JSON body with the product's decoder; a `DecodingError` becomes a 400 in
    /// `ErrorMiddleware`, an oversized body a 413.
    func decodeJSON<T: Decodable>(_ type: T.Type, context: FanoutRequestContext) async throws -> T {
        let body = try await self.body.collect(upTo: context.maxUploadSize)
        return try FanoutRequestContext.decoder.decode(T.self, from: body)
    }
}

import CartStore
import Foundation
import Hummingbird
import NIOCore

/// A `FanoutError` answered over HTTP: `{"error":{"code","message",…}}` with the code's status
/// (`FanoutErrorCode.httpStatus`), or another where a route answers the same code differently
/// (a refused event stream's query is 400 throughout).
struct APIError: HTTPResponseError {
    let error: FanoutError
    let status: HTTPResponse.Status

    init(_ error: FanoutError, status: HTTPResponse.Status? = nil) {
        self.error = error
        self.status = status ?? error.code.httpStatus.map { HTTPResponse.Status(code: $0) } ?? .internalServerError
    }

    init(_ code: FanoutErrorCode, _ message: String, details: [String: Int64] = [:], status: HTTPResponse.Status? = nil) {
        self.init(FanoutError(code, message, details: details), status: status)
    }

    var code: FanoutErrorCode { error.code }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers: HTTPFields = [.contentType: Self.contentType]
        if let challenge = wwwAuthenticate { headers[.wwwAuthenticate] = challenge }
        return Response(status: status, headers: headers, body: .init(byteBuffer: try body()))
    }

    static let contentType = "application/json; charset=utf-8"

    /// The `WWW-Authenticate` challenge of a refused credential (RFC 6750 §3): which kind of
    /// token to send, and, for one that was refused, why in the error code.
    var wwwAuthenticate: String? {
        switch code {
        case .unauthorized: #"Bearer realm="fanout""#
        case .invalidToken: #"Bearer error="invalid_token""#
        case .insufficientScope: #"Bearer error="insufficient_scope""#
        default: nil
        }
    }

    /// The `{"error":{…}}` body.
    func body() throws -> ByteBuffer {
        ByteBuffer(bytes: try FanoutJSON.encoder().encode(ErrorResponse(error)))
    }

    static func malformed(_ message: String) -> APIError {
        APIError(.malformedRequest, message)
    }
}

/// Turns every error into the JSON error shape, so no client ever has to parse an HTML page or
/// an empty 500. Errors that are not ours are logged and answered 500 without internals.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as FanoutError {
            throw APIError(error)
        } catch let error as DecodingError {
            throw APIError.malformed("request body is not the expected JSON: \(Self.describe(error))")
        } catch let error as HTTPError {
            throw APIError(Self.code(for: error.status), error.body ?? error.status.reasonPhrase, status: error.status)
        } catch is NIOTooManyBytesError {
            throw APIError(.bodyTooLarge, "the body is larger than \(context.maxUploadSize) bytes")
        } catch is CancellationError {
            throw APIError(.shuttingDown, "the server is shutting down")
        } catch {
            context.logger.error("unhandled error", metadata: ["fanout.error": "\(error)"])
            throw APIError(.internalError, "internal error")
        }
    }

    /// The code for an error Hummingbird raised with only a status.
    static func code(for status: HTTPResponse.Status) -> FanoutErrorCode {
        switch status {
        case .notFound: .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .contentTooLarge: .bodyTooLarge
        case .unauthorized: .unauthorized
        default: status.code < 500 ? .malformedRequest : .internalError
        }
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): "missing field \"\(key.stringValue)\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            "wrong type at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
        case .dataCorrupted(let context):
            context.codingPath.isEmpty
                ? "invalid JSON" : "invalid value at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
        @unknown default: "invalid JSON"
        }
    }
}

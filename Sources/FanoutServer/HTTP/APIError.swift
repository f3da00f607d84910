import CartStore
import Foundation
import Hummingbird
import NIOCore

/// An error answered as `{"error":{"code","message"}}` with its HTTP status.
struct APIError: HTTPResponseError {
    let status: HTTPResponse.Status
    let code: String
    let message: String
    /// Extra fields for the error object (e.g. the retained range of a too-old answer).
    var details: [String: Int64] = [:]

    init(_ status: HTTPResponse.Status, code: String, _ message: String, details: [String: Int64] = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.details = details
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        Response(
            status: status,
            headers: [.contentType: Self.contentType],
            body: .init(byteBuffer: try body()))
    }

    static let contentType = "application/json; charset=utf-8"

    /// The `{"error":{…}}` body.
    func body() throws -> ByteBuffer {
        ByteBuffer(bytes: try FanoutJSON.encoder().encode(ErrorResponse(code: code, message: message, details: details)))
    }
}

extension APIError {
    /// The HTTP answer for a store error: 404 for what is missing, 409 for state conflicts,
    /// 412 for a failed `If-Match`, 422 for values outside the rules, 503 for a store that
    /// cannot take changes now, 507 for a full disk.
    init(_ error: CartStoreError) {
        let status: HTTPResponse.Status = switch error.code {
        case .cartNotFound, .itemNotFound: .notFound
        case .versionConflict: .preconditionFailed
        case .quantityOverflow, .tooManyItems, .sinceAhead: .conflict
        case .historyTooOld: .gone
        case .overloaded, .storeUnavailable, .schemaTooNew, .databaseInUse, .notAFanoutDatabase: .serviceUnavailable
        case .storageFull: .init(code: 507, reasonPhrase: "Insufficient Storage")
        case .invalidCartID, .invalidSKU, .invalidQuantity, .invalidPrice, .invalidName, .invalidLimit, .invalidSince:
            .unprocessableContent
        }
        self.init(status, code: error.code.rawValue, error.message)
    }

    static func malformed(_ message: String) -> APIError {
        APIError(.badRequest, code: "malformed_request", message)
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
        } catch let error as CartStoreError {
            throw APIError(error)
        } catch let error as DecodingError {
            throw APIError.malformed("request body is not the expected JSON: \(Self.describe(error))")
        } catch let error as HTTPError {
            throw APIError(error.status, code: Self.code(for: error.status), error.body ?? error.status.reasonPhrase)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "body_too_large", "the body is larger than \(context.maxUploadSize) bytes")
        } catch is CancellationError {
            throw APIError(.serviceUnavailable, code: "shutting_down", "the server is shutting down")
        } catch {
            context.logger.error("unhandled error", metadata: ["fanout.error": "\(error)"])
            throw APIError(.internalServerError, code: "internal_error", "internal error")
        }
    }

    static func code(for status: HTTPResponse.Status) -> String {
        switch status {
        case .notFound: "not_found"
        case .methodNotAllowed: "method_not_allowed"
        case .contentTooLarge: "body_too_large"
        case .unauthorized: "unauthorized"
        case .forbidden: "forbidden"
        case .badRequest: "malformed_request"
        default: "http_\(status.code)"
        }
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): "missing field \"\(key.stringValue)\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            "wrong type at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
        case .dataCorrupted(let context):
            context.codingPath.isEmpty ? "invalid JSON" : "invalid value at \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\""
        @unknown default: "invalid JSON"
        }
    }
}

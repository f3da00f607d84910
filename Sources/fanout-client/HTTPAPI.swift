import FanoutProtocol
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The server's HTTP API, for the cart commands and the subscriber's pre-flight check. Bodies
/// and answers are FanoutProtocol's types, the ones the server encodes.
struct HTTPAPI: Sendable {
    let baseURL: URL
    let token: String?

    /// Sends a request and decodes the answer of a 2xx.
    ///
    /// - Throws: `ClientFailure` carrying the server's own error message for a 4xx/5xx, or a
    ///   readable sentence when the server cannot be reached or answers something else.
    func send<Answer: Decodable>(
        _ method: String, _ path: String, body: (any Encodable)? = nil, as answer: Answer.Type
    ) async throws -> Answer {
        guard let url = URL(string: path, relativeTo: baseURL) else {
            throw ClientFailure("cannot build a URL from \(baseURL) and \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = try FanoutJSON.encoder().encode(body)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw ClientFailure("cannot reach \(baseURL.absoluteString): \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else {
            throw Self.failure(status: status, body: data)
        }
        do {
            return try FanoutJSON.decoder().decode(Answer.self, from: data)
        } catch {
            throw ClientFailure("the server's answer to \(method) \(path) is not what fanout-server sends: \(error)")
        }
    }

    static func failure(status: Int, body: Data) -> ClientFailure {
        guard let answer = try? FanoutJSON.decoder().decode(ErrorResponse.self, from: body) else {
            return ClientFailure("server answered HTTP \(status)")
        }
        return ClientFailure(
            "server refused (\(status) \(answer.error.code)): \(answer.error.message)",
            code: FanoutErrorCode(rawValue: answer.error.code))
    }
}

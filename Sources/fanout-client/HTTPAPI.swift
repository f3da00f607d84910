import FanoutProtocol
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The server's HTTP API, for the cart commands and the subscriber's pre-flight check.
struct HTTPAPI: Sendable {
    let baseURL: URL
    let token: String?

    /// Sends a request and returns the JSON object of a 2xx answer.
    ///
    /// - Throws: `ClientFailure` carrying the server's own error message for a 4xx/5xx, or a
    ///   readable sentence when the server cannot be reached.
    func send(_ method: String, _ path: String, body: [String: Any]? = nil, headers: [String: String] = [:]) async throws -> [String: Any] {
        guard let url = URL(string: path, relativeTo: baseURL) else {
            throw ClientFailure("cannot build a URL from \(baseURL) and \(path)")
        }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body {
            request.httpBody = try JSONSerialization.data(withJSONObject: body)
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
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
        guard (200..<300).contains(status) else {
            throw Self.failure(status: status, object: object)
        }
        return object
    }

    static func failure(status: Int, object: [String: Any]) -> ClientFailure {
        if let error = object["error"] as? [String: Any], let message = error["message"] as? String {
            let code = error["code"] as? String ?? "error"
            return ClientFailure("server refused (\(status) \(code)): \(message)", status: status)
        }
        return ClientFailure("server answered HTTP \(status)", status: status)
    }
}

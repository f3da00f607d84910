import ArgumentParser
import FanoutClient
import Foundation

/// How both commands reach the server: its one address (`--url`), the token, the TLS trust.
struct ServerConnection: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The server: http://host:port, or https:// with TLS (a ws:// or wss:// …/subscribe URL names the same server).",
            valueName: "url"))
    var url: String = "http://127.0.0.1:8080"

    @Option(help: "Bearer token, if the server requires one (or set FANOUT_TOKEN).")
    var token: String?

    @OptionGroup var trust: TrustOptions

    func validate() throws {
        _ = try server()
    }

    /// The server's base URL: `--url` without a path, its `ws`/`wss` scheme said as `http`/`https`.
    func server() throws -> URL {
        guard var components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let http = ["http": "http", "https": "https", "ws": "http", "wss": "https"][scheme], components.host?.isEmpty == false
        else {
            throw ValidationError("--url must be the server's http:// or https:// address, such as http://127.0.0.1:8080 (got \(url))")
        }
        components.scheme = http
        components.path = ""
        components.query = nil
        components.fragment = nil
        guard let server = components.url else { throw ValidationError("--url is not a URL (got \(url))") }
        return server
    }

    var credentials: Credentials {
        (token ?? ProcessInfo.processInfo.environment["FANOUT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }).map(Credentials.token) ?? .none
    }

    func api() throws -> CartServerAPI {
        CartServerAPI(baseURL: try server(), credentials: credentials, trust: try trust.trust())
    }
}

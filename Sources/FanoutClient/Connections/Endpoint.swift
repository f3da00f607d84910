import FanoutProtocol
import Foundation
import NIOCore
import NIOSSL

/// Where a connection goes: host, port, and whether it speaks TLS (`wss://`, `https://`, with
/// the system's trust roots and the host name checked).
struct Endpoint: Sendable {
    let host: String
    let port: Int
    let tls: Bool

    init(_ url: URL) throws(RemoteStoreError) {
        guard let host = url.host, !host.isEmpty else { throw .invalidURL(url) }
        switch url.scheme {
        case "ws", "http": tls = false
        case "wss", "https": tls = true
        default: throw .invalidURL(url)
        }
        self.host = host
        port = url.port ?? (tls ? 443 : 80)
    }

    /// `Host` header value.
    var hostHeader: String { "\(host):\(port)" }

    /// The request target of `url`: its path (or `/`) and query.
    static func target(of url: URL) -> String {
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?\(query)" }
        return target
    }

    /// Adds TLS to a new channel's pipeline, first, when the endpoint needs it.
    func secure(_ channel: any Channel) throws {
        guard tls else { return }
        let context = try Self.tlsContext.get()
        // A name goes in SNI and is what the certificate must be for; an IP address cannot go
        // in SNI, and the certificate is then checked against the address connected to.
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host))
    }

    private static let tlsContext = Result { try NIOSSLContext(configuration: .makeClientConfiguration()) }
}

extension RemoteStoreError {
    static func invalidURL(_ url: URL) -> RemoteStoreError {
        .invalid(FanoutError(.malformedRequest, "not a URL of a fanout-server (http://, https://, ws:// or wss:// with a host): \(url)"))
    }
}

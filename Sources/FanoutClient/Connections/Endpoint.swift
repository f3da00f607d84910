import FanoutProtocol
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// Where a connection goes: host, port, and whether it speaks TLS (`wss://`, `https://`, with
/// the certificate checked against `trust` and the host name).
struct Endpoint: Sendable {
    let host: String
    let port: Int
    let tls: Bool
    let trust: ServerTrust

    init(_ url: URL, trust: ServerTrust) throws(RemoteStoreError) {
        self.trust = trust
        guard let host = url.host, !host.isEmpty else { throw .invalidURL(url) }
        switch url.scheme {
        case "ws", "http": tls = false
        case "wss", "https": tls = true
        default: throw .invalidURL(url)
        }
        self.host = host
        port = url.port ?? (tls ? 443 : 80)
    }

    /// Connects with `bootstrap`: straight to the address when the host is one (nothing to look
    /// up: no resolver, whose lookups queue on a dispatch queue behind the process's other
    /// work), else by name.
    func connect<Output: Sendable>(
        _ bootstrap: ClientBootstrap, _ initializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Output>
    ) async throws -> Output {
        if let address = try? SocketAddress(ipAddress: host, port: port) {
            return try await bootstrap.connect(to: address, channelInitializer: initializer)
        }
        return try await bootstrap.connect(host: host, port: port, channelInitializer: initializer)
    }

    /// `Host` header value.
    var hostHeader: String { "\(host):\(port)" }

    /// No connection could be made, said as a person reads it: "cannot reach HOST:PORT
    /// (connection refused)", or "cannot resolve HOST" (`ConnectionProblem.isUnresolvable`),
    /// rather than SwiftNIO's account of every address tried.
    func unreachable(_ error: any Error) -> RemoteStoreError {
        if let failure = error as? NIOConnectionError, failure.connectionErrors.isEmpty,
            failure.dnsAError != nil || failure.dnsAAAAError != nil
        {
            return .unreachable(ConnectionProblem.cannotResolve(host))
        }
        if error is SocketAddressError { return .unreachable(ConnectionProblem.cannotResolve(host)) }
        return .unreachable("cannot reach \(host):\(port) (\(Self.reason(error)))")
    }

    /// Why a connection failed, in a few words.
    static func reason(_ error: any Error) -> String {
        switch error {
        case let failure as NIOConnectionError:
            failure.connectionErrors.first.map { reason($0.error) } ?? "no address to connect to"
        case let io as IOError:
            switch io.errnoCode {
            case ECONNREFUSED: "connection refused: is the server running?"
            case ETIMEDOUT: "timed out"
            case EHOSTUNREACH, ENETUNREACH: "no route to the host"
            case ECONNRESET: "the connection was reset"
            default: String(cString: strerror(io.errnoCode))
            }
        case ChannelError.connectTimeout: "no connection within the time allowed"
        case is NIOSSLError, is BoringSSLError:
            tlsReason(error)
        default: "\(error)"
        }
    }

    /// Why a handshake failed: the certificate, or TLS itself (a server that does not speak it).
    private static func tlsReason(_ error: any Error) -> String {
        let text = "\(error)".lowercased()
        if text.contains("certificate") {
            return
                "the server's TLS certificate is not trusted (not signed by a trusted authority, expired, or for another name): see ServerTrust or --cacert"
        }
        return "the TLS handshake failed: is it a TLS (https, wss) server?"
    }

    /// The request target of `url`: its path (or `/`) and query.
    static func target(of url: URL) -> String {
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?\(query)" }
        return target
    }

    /// Adds TLS to a new channel's pipeline, first, when the endpoint needs it.
    func secure(_ channel: any Channel) throws {
        guard tls else { return }
        let context = try trust.context.get()
        // A name goes in SNI and is what the certificate must be for; an IP address cannot go
        // in SNI, and the certificate is then checked against the address connected to.
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host))
    }

    /// A connection with HTTP/1.1 client handlers (after TLS when the endpoint needs it).
    ///
    /// - Throws: `RemoteStoreError.unreachable` when no connection could be made within 5 s.
    func connectHTTP() async throws -> NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart> {
        do {
            return try await connect(ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connectTimeout(.seconds(5))) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try secure(channel)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        } catch {
            throw unreachable(error)
        }
    }
}

extension RemoteStoreError {
    static func invalidURL(_ url: URL) -> RemoteStoreError {
        .invalid(FanoutError(.malformedRequest, "not a URL of a fanout-server (http://, https://, ws:// or wss:// with a host): \(url)"))
    }
}

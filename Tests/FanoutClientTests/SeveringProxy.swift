import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP proxy on 127.0.0.1 in front of a server, that can drop its clients' side of every
/// connection while keeping the server's side open and silent: what a server sees of a client
/// whose network changed (its old connection dead, never closed), while the client sees its
/// connection end and makes a new one.
final class SeveringProxy: Sendable {
    private struct Pair {
        var client: Int32
        var upstream: Int32
        var severed = false
    }

    let port: Int
    private let listener: Int32
    private let pairs = NIOLockedValueBox<[Pair]>([])

    /// Listens on a free port, forwarding each connection to 127.0.0.1:`upstreamPort`.
    init(upstreamPort: Int) throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 && listen(socket, 64) == 0
            }
        }
        guard listening else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EADDRNOTAVAIL) }
        listener = socket
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [pairs] in
            while true {
                let client = accept(socket, nil, nil)
                guard client >= 0 else {
                    if errno == EINTR { continue }
                    return
                }
                guard let upstream = try? connectedSocket(port: upstreamPort) else {
                    close(client)
                    continue
                }
                pairs.withLockedValue { $0.append(Pair(client: client, upstream: upstream)) }
                // An end either side makes is passed on, as a network does, unless it is the
                // proxy's own severing.
                let passOn: @Sendable (Int32) -> Void = { target in
                    let severed = pairs.withLockedValue { $0.first { $0.client == client }?.severed ?? true }
                    if !severed { shutdown(target, Int32(SHUT_WR)) }
                }
                Thread.detachNewThread { Self.pump(from: client, to: upstream, ended: passOn) }
                Thread.detachNewThread { Self.pump(from: upstream, to: client, ended: passOn) }
            }
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Connections made through the proxy so far.
    var connections: Int { pairs.withLockedValue { $0.count } }

    /// Copies bytes until either side ends, then calls `ended` with `target`; never closes
    /// anything (`closeSevered`, `closeAll` do).
    private static func pump(from source: Int32, to target: Int32, ended: (Int32) -> Void) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = retryingInterrupted { buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, $0.count, 0) } }
            guard count > 0 else { return ended(target) }
            var sent = 0
            while sent < count {
                let written = retryingInterrupted {
                    buffer.withUnsafeBytes { send(target, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                }
                guard written > 0 else { return }
                sent += written
            }
        }
    }

    /// Ends the clients' side of every connection open now; the server's side stays open, and
    /// nothing more is forwarded to it from them.
    func severClients() {
        pairs.withLockedValue { pairs in
            for index in pairs.indices where !pairs[index].severed {
                pairs[index].severed = true
                shutdown(pairs[index].client, Int32(SHUT_RDWR))
                // The server's side stops being read, so whatever it sends stays unacknowledged.
                shutdown(pairs[index].upstream, Int32(SHUT_RD))
            }
        }
    }

    /// Closes the server's side of the connections `severClients` left open: the server sees
    /// them close.
    func closeSevered() {
        pairs.withLockedValue { pairs in
            for index in pairs.indices where pairs[index].severed && pairs[index].upstream >= 0 {
                close(pairs[index].upstream)
                close(pairs[index].client)
                pairs[index].upstream = -1
            }
        }
    }

    /// Closes everything.
    func closeAll() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        pairs.withLockedValue { pairs in
            for pair in pairs where pair.upstream >= 0 {
                shutdown(pair.client, Int32(SHUT_RDWR))
                shutdown(pair.upstream, Int32(SHUT_RDWR))
            }
        }
    }
}

import FanoutConcurrency
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// One HTTP/1.1 request and its answer, on its own connection, with SwiftNIO.
///
/// Not URLSession: on Linux, cancelling a task while URLSession works for it can stop the
/// process (FoundationNetworking's task registry traps), and a subscription cancels its
/// connection whenever its observers change.
enum HTTPExchange {
    /// The largest answer body taken: far above any the server sends for one request.
    static let maxBody = 64 << 20

    /// Sends the request and returns the answer's status and body.
    ///
    /// - Throws: `RemoteStoreError.unreachable` when no connection could be made or it broke
    ///   before the answer was whole; `unexpectedAnswer` for a body over `maxBody`.
    static func send(
        _ method: HTTPMethod, _ url: URL, trust: ServerTrust, headers extra: [(String, String)], body: [UInt8]?
    ) async throws -> (status: Int, body: [UInt8]) {
        let phase = NIOLockedValueBox(Phase.connecting)
        return try await Deadline.race(
            until: .now + timeout,
            expired: {
                RemoteStoreError.unreachable(
                    "no answer from \(url.host ?? "the server") within \(timeout) (\(method) \(url.path): \(phase.withLockedValue { $0 }))")
            }
        ) {
            try await exchange(method, url, trust: trust, headers: extra, body: body, phase: phase)
        }
    }

    /// How far an exchange got: said when it runs out of time.
    enum Phase: String, CustomStringConvertible {
        case connecting = "connecting"
        case sending = "connected, sending the request"
        case awaitingAnswer = "request sent, no answer yet"
        case readingAnswer = "reading the answer"

        var description: String { rawValue }
    }

    /// How long a request may take, answer included.
    static let timeout: Duration = .seconds(30)

    private static func exchange(
        _ method: HTTPMethod, _ url: URL, trust: ServerTrust, headers extra: [(String, String)], body: [UInt8]?,
        phase: NIOLockedValueBox<Phase>
    ) async throws -> (status: Int, body: [UInt8]) {
        let endpoint = try Endpoint(url, trust: trust)
        let (host, port) = (endpoint.host, endpoint.port)
        let channel = try await endpoint.connectHTTP()
        phase.withLockedValue { $0 = .sending }
        var headers = HTTPHeaders([("Host", endpoint.hostHeader), ("Connection", "close")] + extra)
        if let body { headers.add(name: "Content-Length", value: "\(body.count)") }
        let target = Endpoint.target(of: url)
        let head = HTTPRequestHead(version: .http1_1, method: method, uri: target, headers: headers)
        do {
            return try await channel.executeThenClose { inbound, outbound in
                // A server may answer and close before the request has all gone out (a GET
                // answered at its head, a 413 before the body): then its answer, if whole, is
                // the answer, and the failed write is said only when no answer came.
                var writeFailure: (any Error)?
                do {
                    try await outbound.write(.head(head))
                    if let body { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
                    try await outbound.write(.end(nil))
                } catch {
                    writeFailure = error
                }
                phase.withLockedValue { $0 = .awaitingAnswer }
                var status = 0
                var answer: [UInt8] = []
                for try await part in inbound {
                    switch part {
                    case .head(let head):
                        status = Int(head.status.code)
                        phase.withLockedValue { $0 = .readingAnswer }
                    case .body(let buffer):
                        guard answer.count + buffer.readableBytes <= maxBody else {
                            throw RemoteStoreError.unexpectedAnswer("an answer over \(maxBody) bytes")
                        }
                        answer += buffer.readableBytesView
                    case .end:
                        return (status, answer)
                    }
                }
                if let writeFailure { throw writeFailure }
                throw RemoteStoreError.unreachable("the connection to \(host):\(port) closed before the answer was whole")
            }
        } catch let error as RemoteStoreError {
            throw error
        } catch {
            throw RemoteStoreError.unreachable("\(host):\(port): \(Endpoint.reason(error))")
        }
    }
}

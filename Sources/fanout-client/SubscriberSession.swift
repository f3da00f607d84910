import FanoutProtocol
import Foundation
import HummingbirdWSClient
import Logging
import NIOWebSocket
import Synchronization

/// One subscriber's life: connect, subscribe after the last printed seq, heartbeat, print; on
/// any disconnect, back off (with jitter) and do it again. Only refusals that retrying cannot
/// fix (bad token, refused origin) end it, with a message and a non-zero exit.
struct SubscriberSession: Sendable {
    enum Transport: String, Sendable, CaseIterable {
        case websocket, sse
    }

    let url: String
    let transport: Transport
    let carts: [String]?
    let token: String?
    let state: SeqState
    let printer: EventPrinter

    /// Gives up on a server that keeps refusing the upgrade after this many tries in a row.
    static let maxRefusedUpgrades = 5

    func run() async throws {
        var failures = 0
        var refusedUpgrades = 0
        while true {
            try Task.checkCancellation()
            try await preflight()
            let received = MessageCounter()
            do {
                switch transport {
                case .websocket: try await connectOnce(received: received)
                case .sse: try await streamOnce(received: received)
                }
                refusedUpgrades = 0
            } catch let error as WebSocketClientError where error == .webSocketUpgradeFailed {
                refusedUpgrades += 1
                if refusedUpgrades >= Self.maxRefusedUpgrades {
                    throw ClientFailure(
                        "the server refused the WebSocket upgrade \(refusedUpgrades) times (origin, token or capacity): giving up")
                }
            } catch let failure as ClientFailure {
                throw failure
            } catch let violation as ProtocolViolation {
                FileHandle.standardError.write(
                    Data(
                        "fanout-client: the server broke the protocol (\(violation)); resuming after seq \(state.last.map(String.init) ?? "none")\n"
                            .utf8))
            } catch {
                // Network errors (the server is down or restarting, the connection broke): say
                // so, then retry below.
                FileHandle.standardError.write(
                    Data(
                        "fanout-client: connection lost (\(error)); retrying, to resume after seq \(state.last.map(String.init) ?? "none")\n"
                            .utf8))
            }
            failures = received.count > 0 ? 0 : failures + 1
            try await Task.sleep(for: Self.backoff(failures: failures))
        }
    }

    /// Full jitter over an exponential ceiling: 0.1 s doubling to 5 s.
    static func backoff(failures: Int) -> Duration {
        let ceiling = min(5.0, 0.1 * pow(2.0, Double(min(failures, 10))))
        return .milliseconds(Int(Double.random(in: 0.05...max(0.05, ceiling)) * 1_000))
    }

    /// Asks the HTTP API (with the token) whether we may subscribe at all, so an auth failure is
    /// reported once instead of retried forever. An unreachable server is left to the retry loop.
    private func preflight() async throws {
        guard var components = URLComponents(string: url) else { throw ClientFailure("bad URL \(url)") }
        components.scheme = components.scheme == "wss" ? "https" : "http"
        components.path = ""
        components.query = nil
        guard let base = components.url else { throw ClientFailure("bad URL \(url)") }
        do {
            _ = try await HTTPAPI(baseURL: base, token: token).send("GET", "/events?limit=1", as: EventsPage.self)
        } catch let failure as ClientFailure where failure.isAuthorizationFailure {
            throw failure
        } catch {
            // Unreachable, restarting, or an old server: the WebSocket attempt will tell.
        }
    }

    /// One event stream, from after the last printed seq.
    private func streamOnce(received: MessageCounter) async throws {
        guard var components = URLComponents(string: url) else { throw ClientFailure("bad URL \(url)") }
        components.scheme = "http"
        if let carts {
            components.queryItems = (components.queryItems ?? []) + [URLQueryItem(name: "carts", value: carts.joined(separator: ","))]
        }
        guard let streamURL = components.url else { throw ClientFailure("bad URL \(url)") }
        try await EventStreamConnection(url: streamURL, token: token, lastEventID: state.last, printer: printer, received: received).run()
        FileHandle.standardError.write(
            Data("fanout-client: the server ended the stream; resuming after seq \(state.last.map(String.init) ?? "none")\n".utf8))
    }

    private func connectOnce(received: MessageCounter) async throws {
        var configuration = WebSocketClientConfiguration()
        // Each server message is one frame; a snapshot part can be 256 KiB, or one cart alone.
        configuration.maxFrameSize = Self.maxMessageSize
        if let token { configuration.additionalHeaders[.authorization] = "Bearer \(token)" }
        var logger = Logger(label: "fanout-client")
        logger.logLevel = .critical
        let carts = carts
        let state = state
        let printer = printer
        let close = try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, outbound, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for try await message in inbound.messages(maxSize: Self.maxMessageSize) {
                    guard case .text(let text) = message else { continue }
                    let decoded = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(text.utf8))
                    received.increment()
                    if case .welcome(let welcome) = decoded {
                        try await SubscriberHandshake.answer(
                            welcome, carts: carts, since: state.last, outbound: outbound, heartbeatsIn: &group)
                    }
                    try printer.handle(decoded, raw: text)
                }
                group.cancelAll()
            }
        }
        if let close, close.closeCode != .normalClosure {
            FileHandle.standardError.write(
                Data(
                    "fanout-client: disconnected (\(Self.describe(close))); resuming after seq \(state.last.map(String.init) ?? "none")\n"
                        .utf8))
        }
    }

    /// The largest server message taken: far above any the server sends (a snapshot part is at
    /// most 256 KiB unless one cart alone is larger), yet bounded.
    static let maxMessageSize = 16 << 20

    static func describe(_ close: WebSocketCloseFrame) -> String {
        let code: String =
            switch close.closeCode {
            case .goingAway: "1001"
            case .unknown(let number): "\(number)"
            default: "\(close.closeCode)"
            }
        return [code, close.reason].compactMap { $0 }.joined(separator: " ")
    }
}

/// The server sent what the protocol does not allow. Unlike a `ClientFailure`, which ends the
/// program, the session drops the connection and resumes.
struct ProtocolViolation: Error, CustomStringConvertible {
    let description: String
}

/// Messages received on one connection: a connection that got any resets the backoff.
final class MessageCounter: Sendable {
    private let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

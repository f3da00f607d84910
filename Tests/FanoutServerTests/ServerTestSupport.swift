import CartStore
import FanoutTestSupport
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOWebSocket
import Synchronization
import Testing

@testable import FanoutServer

/// A server on port 0 over an in-memory (or given) store, for one test.
func withServer<T: Sendable>(
    _ configure: (inout ServerConfiguration) -> Void = { _ in },
    store: CartStore? = nil,
    logger: Logger? = nil,
    _ body: @escaping @Sendable (_ port: Int, _ server: FanoutServerApp) async throws -> T
) async throws -> T {
    var configuration = ServerConfiguration()
    configuration.port = 0
    configuration.heartbeatInterval = .milliseconds(200)
    // Long enough that no heartbeating client expires on a loaded machine; expiry tests set 1 s.
    configuration.leaseTTL = .seconds(5)
    configure(&configuration)
    var quiet = Logger(label: "fanout-test")
    quiet.logLevel = .warning
    let server = try await buildApplication(
        configuration: configuration, store: try store ?? CartStore.inMemory(), logger: logger ?? quiet,
        eventLoopGroup: .shared(inProcessServerLoops))
    return try await server.application.test(.live) { client in
        try await body(try #require(client.port), server)
    }
}

/// A WebSocket subscriber driven by a test: records every server message, sends on demand,
/// and heartbeats by itself unless told not to.
final class TestSubscriber: Sendable {
    /// What the connection task and the test share.
    private final class Shared: Sendable {
        let received = NIOLockedValueBox<[ServerMessage]>([])
        let writer = NIOLockedValueBox<WebSocketOutboundWriter?>(nil)
        let heartbeating: Synchronization.Atomic<Bool>
        init(heartbeats: Bool) { heartbeating = Atomic(heartbeats) }
    }

    private let shared: Shared
    private let connection: Task<WebSocketCloseFrame?, any Error>

    init(port: Int, path: String = "/subscribe", headers: HTTPFields = [:], heartbeats: Bool = true) {
        let shared = Shared(heartbeats: heartbeats)
        self.shared = shared
        connection = Task {
            var configuration = WebSocketClientConfiguration()
            configuration.additionalHeaders = headers
            return try await WebSocketClient.connect(
                url: "ws://127.0.0.1:\(port)\(path)", configuration: configuration, logger: Logger(label: "test-subscriber")
            ) { inbound, outbound, _ in
                shared.writer.withLockedValue { $0 = outbound }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        while true {
                            try await Task.sleep(for: .milliseconds(100))
                            // A connection the server closed (a lapsed lease, say) takes no more:
                            // the heartbeats stop, and the close frame is the test's to read.
                            guard shared.heartbeating.load(ordering: .relaxed) else { continue }
                            do {
                                try await outbound.write(.text(#"{"type":"heartbeat"}"#))
                            } catch {
                                return
                            }
                        }
                    }
                    for try await message in inbound.messages(maxSize: 1 << 22) {
                        guard case .text(let text) = message else { continue }
                        let decoded = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(text.utf8))
                        shared.received.withLockedValue { $0.append(decoded) }
                    }
                    group.cancelAll()
                }
            }
        }
    }

    var messages: [ServerMessage] { shared.received.withLockedValue { $0 } }

    var events: [CartEvent] {
        messages.compactMap { if case .event(let event) = $0 { event } else { nil } }
    }

    var errors: [String] {
        messages.compactMap { if case .error(let code, _) = $0 { code } else { nil } }
    }

    var snapshots: [(carts: [Cart], seq: Int64, reason: SnapshotReason)] {
        messages.compactMap { if case .snapshot(let carts, let seq, let reason, _) = $0 { (carts, seq, reason) } else { nil } }
    }

    func stopHeartbeats() { shared.heartbeating.store(false, ordering: .relaxed) }

    func send(_ message: ClientMessage) async throws {
        let data = try FanoutJSON.encoder().encode(message)
        try await sendRaw(.text(String(decoding: data, as: UTF8.self)))
    }

    func sendRaw(_ frame: WebSocketOutboundWriter.OutboundFrame) async throws {
        await eventually("the connection to open") { shared.writer.withLockedValue { $0 != nil } }
        guard let writer = shared.writer.withLockedValue({ $0 }) else {
            _ = try await connection.value  // surfaces why it never opened
            throw CancellationError()
        }
        try await writer.write(frame)
    }

    /// Waits for the welcome, then subscribes.
    func subscribe(carts: [String]? = nil, since: Int64? = nil, presence: PresenceRequest? = nil) async throws {
        await eventually("welcome") { messages.contains { $0.kind == .welcome } }
        try await send(.subscribe(carts: carts, since: since, presence: presence))
    }

    /// Its presence messages, in order.
    var presence: [ServerMessage] {
        messages.filter { [.presence, .presenceJoin, .presenceUpdate, .presenceLeave].contains($0.kind) }
    }

    /// Who it holds on `cart`, from its presence messages as a client applies them.
    func members(of cart: String) -> [PresenceMember.ID: PresenceMember] {
        var members: [PresenceMember.ID: PresenceMember] = [:]
        for message in presence {
            switch message {
            case .presence(let cartID, let all) where cartID == cart:
                members = Dictionary(uniqueKeysWithValues: all.map { ($0.id, $0) })
            case .presenceJoin(let cartID, let member) where cartID == cart, .presenceUpdate(let cartID, let member) where cartID == cart:
                members[member.id] = member
            case .presenceLeave(let cartID, let id, _) where cartID == cart:
                members[id] = nil
            default:
                break
            }
        }
        return members
    }

    /// The close frame the server sent, once the connection ends.
    func closeFrame() async throws -> WebSocketCloseFrame? {
        try await connection.value
    }

    func close() async {
        if let outbound = shared.writer.withLockedValue({ $0 }) {
            try? await outbound.close(.normalClosure, reason: nil)
        }
        _ = try? await connection.value
    }
}

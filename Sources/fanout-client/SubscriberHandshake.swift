import FanoutProtocol
import HummingbirdWSClient

/// What every subscriber of fanout-server does on the welcome: subscribe after a seq, then
/// heartbeat at the interval the server announced, for as long as `group` runs.
enum SubscriberHandshake {
    static func answer(
        _ welcome: ServerMessage.Welcome, carts: [String]?, since: Int64?,
        outbound: WebSocketOutboundWriter, heartbeatsIn group: inout ThrowingTaskGroup<Void, any Error>
    ) async throws {
        try await outbound.write(.text(try text(of: .subscribe(carts: carts, since: since))))
        let interval = heartbeatInterval(for: welcome)
        let heartbeat = try text(of: .heartbeat)
        group.addTask {
            while true {
                try await Task.sleep(for: interval)
                try await outbound.write(.text(heartbeat))
            }
        }
    }

    /// A client message as the JSON text of its frame.
    static func text(of message: ClientMessage) throws -> String {
        String(decoding: try FanoutJSON.encoder().encode(message), as: UTF8.self)
    }

    /// How often to heartbeat: the server's interval, but never more than 20 times a second.
    static func heartbeatInterval(for welcome: ServerMessage.Welcome) -> Duration {
        .milliseconds(Int(max(0.05, welcome.heartbeatInterval) * 1_000))
    }
}

import FanoutProtocol
import HummingbirdWSClient

/// What every subscriber of fanout-server does on the welcome: subscribe after a seq, then
/// heartbeat at the interval the server announced, for as long as `group` runs.
enum SubscriberHandshake {
    static func answer(
        _ welcome: ServerMessage.Welcome, carts: [String]?, since: Int64?,
        outbound: WebSocketOutboundWriter, heartbeatsIn group: inout ThrowingTaskGroup<Void, any Error>
    ) async throws {
        let subscribe = ClientMessage.subscribe(carts: carts, since: since)
        try await outbound.write(.text(String(decoding: try FanoutJSON.encoder().encode(subscribe), as: UTF8.self)))
        let interval = Duration.milliseconds(Int(max(0.05, welcome.heartbeatInterval) * 1_000))
        group.addTask {
            while true {
                try await Task.sleep(for: interval)
                try await outbound.write(.text(#"{"type":"heartbeat"}"#))
            }
        }
    }
}

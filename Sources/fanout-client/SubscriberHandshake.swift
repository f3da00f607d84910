import FanoutProtocol
import HummingbirdWSClient

/// What every subscriber of fanout-server does on the welcome: subscribe after a seq, then
/// heartbeat at the interval the server announced, for as long as `group` runs.
enum SubscriberHandshake {
    static func answer(
        _ welcome: ServerMessage.Welcome, carts: [String]?, since: Int64?,
        outbound: WebSocketOutboundWriter, heartbeatsIn group: inout ThrowingTaskGroup<Void, any Error>
    ) async throws {
        try await outbound.write(.text(try ClientMessage.subscribe(carts: carts, since: since).jsonText()))
        let interval = welcome.clientHeartbeatInterval
        let heartbeat = try ClientMessage.heartbeat.jsonText()
        group.addTask {
            while true {
                try await Task.sleep(for: interval)
                try await outbound.write(.text(heartbeat))
            }
        }
    }
}

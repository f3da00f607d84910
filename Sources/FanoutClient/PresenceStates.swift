import FanoutConcurrency
import FanoutProtocol
import NIOConcurrencyHelpers

/// The presence state a subscription shows, changed while it runs
/// (`RemoteCartStore.setPresenceState`). The next connection's plan reads it; an open WebSocket
/// sends each change (the latest, at most `PresenceLimits.maxStateChangesPerSecond` a second,
/// so the server never refuses one for its rate); an open event stream is replaced by one with
/// the new state (`EventStreamHandover`).
package final class PresenceStates: Sendable {
    private let current: NIOLockedValueBox<PresenceState>
    /// Wakes whoever sends the changes (one at a time: the connection open now).
    let changes = WakeUps()

    init(_ state: PresenceState) {
        current = NIOLockedValueBox(state)
    }

    /// The state to show now.
    var state: PresenceState {
        get { current.withLockedValue { $0 } }
        set {
            current.withLockedValue { $0 = newValue }
            changes.wake()
        }
    }

    /// Sends each change of the state on a WebSocket, the latest first, until cancelled.
    /// `shown` is the state the subscription was made with.
    func send(after shown: PresenceState, with writer: WebSocketLink.Writer) async throws {
        var shown = shown
        while true {
            await changes.next()
            try Task.checkCancellation()
            let state = self.state
            guard state != shown else { continue }
            try await writer.send(.presence(state: state))
            shown = state
            try await Task.sleep(for: .seconds(1) / PresenceLimits.maxStateChangesPerSecond)
        }
    }
}

import ServiceLifecycle

/// The hub's part of the server's life: heartbeats to subscribers every interval while the
/// server runs (a slice of them every `1 / HeartbeatSlices.count` of it), and on graceful
/// shutdown (SIGTERM/SIGINT) every subscriber ended as shutting down, new ones refused.
///
/// It runs among the application's services, before the HTTP server in the list, so it is told
/// to shut down after it: the server quiesces first, and every subscriber connection ends itself
/// with "shutting down" then (the transport's close); this ends whatever is left, and waits for
/// the close handshakes, so that no client misses its close frame because the process exited.
struct HubService: Service {
    let hub: FanoutHub
    let heartbeatInterval: Duration

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                var slice = 0
                while true {
                    try await Task.sleep(for: heartbeatInterval / HeartbeatSlices.count)
                    hub.heartbeat(slice: slice)
                    slice = (slice + 1) % HeartbeatSlices.count
                }
            }
        } catch is CancellationError {
            // Shutting down.
        }
        hub.shutDown()
        // Each client answers its close frame in a moment; one that does not is closed at the
        // transport's timeout, or here when the process exits.
        await hub.waitForConnectionsToClose(within: .seconds(5))
    }
}

/// Each subscriber is heartbeaten once an interval, the subscribers of a loop in `count`
/// slices taken in turn, a tenth of the interval apart: a heartbeat is one write call per
/// subscriber, and sent to all at once it would hold each loop for as long as an event to all
/// (at 19 000 subscribers, a tenth of a second), delaying every event that came meanwhile.
enum HeartbeatSlices {
    static let count = 10
}

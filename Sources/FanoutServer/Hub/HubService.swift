import ServiceLifecycle

/// The hub's part of the server's life: heartbeats to subscribers every interval while the
/// server runs, and on graceful shutdown (SIGTERM/SIGINT) every subscriber ended as shutting
/// down, new ones refused.
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
                while true {
                    try await Task.sleep(for: heartbeatInterval)
                    hub.heartbeat()
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

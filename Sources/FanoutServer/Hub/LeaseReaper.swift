import ServiceLifecycle

/// Expires lapsed leases and sends the server's heartbeats, on one clock.
///
/// It ticks four times a second at most, so a subscriber that stops renewing its lease is
/// dropped within TTL + ¼ s (or TTL/4, whichever is shorter, past the TTL).
struct LeaseReaper: Service {
    let hub: FanoutHub
    let leaseTTL: Duration
    let heartbeatInterval: Duration

    var tick: Duration { min(.milliseconds(250), leaseTTL / 4, heartbeatInterval) }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                var nextHeartbeat = ContinuousClock.now + heartbeatInterval
                while true {
                    try await Task.sleep(for: tick)
                    let now = ContinuousClock.now
                    hub.expireLeases(ttl: leaseTTL, now: now)
                    if now >= nextHeartbeat {
                        hub.heartbeat()
                        nextHeartbeat = now + heartbeatInterval
                    }
                }
            }
        } catch is CancellationError {
            // Shutting down.
        }
    }
}

/// Closes every subscriber as "going away" (1001) when shutdown begins.
///
/// It runs in the outer service group, after the application, so it is told first on
/// SIGTERM/SIGINT: subscribers get their 1001 before the HTTP server starts closing
/// connections its own way, then the server finishes in-flight requests.
struct SubscriberShutdown: Service {
    let hub: FanoutHub

    func run() async throws {
        try? await gracefulShutdown()
        hub.shutDown()
    }
}

import NIOConcurrencyHelpers
import Synchronization

/// One WebSocket connection, as the hub holds it: its outbox and its lease.
///
/// The lease is the networked weak reference: every client message renews it, and when it
/// lapses the reaper drops the subscriber, as a weak reference goes nil when nobody holds it.
final class Subscriber: Sendable {
    let id: String
    let outbox: Outbox
    private let lastHeard: NIOLockedValueBox<ContinuousClock.Instant>

    init(id: String, outboxLimit: Int, now: ContinuousClock.Instant = .now) {
        self.id = id
        self.outbox = Outbox(limit: outboxLimit)
        self.lastHeard = NIOLockedValueBox(now)
    }

    /// Renews the lease.
    func heard(at instant: ContinuousClock.Instant = .now) {
        lastHeard.withLockedValue { $0 = instant }
    }

    func leaseExpired(ttl: Duration, now: ContinuousClock.Instant) -> Bool {
        lastHeard.withLockedValue { now - $0 > ttl }
    }
}

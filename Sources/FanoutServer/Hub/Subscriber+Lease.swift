import NIOCore

/// Where a lease expires.
///
/// A subscriber's lease is renewed by every sign of life from its peer (`renewLease()`: any
/// WebSocket message of the protocol, not one answered `bad_message`; for an event stream, whose
/// client never speaks, its connection draining).
/// One timer per subscriber, on its event loop, fires when the lease would lapse; if the lease
/// was renewed meanwhile it is set again for the new deadline, otherwise the subscriber ends
/// with `.leaseExpired`. So a healthy subscriber costs one timer firing per TTL
/// and no lock, and no sweep walks every subscriber: the cost does not grow with how many are
/// healthy, and an expiry is on time to the timer's precision.
extension Subscriber {
    /// Renews the lease: the peer showed a sign of life. On the subscriber's loop.
    func renewLease() {
        leaseRenewedAt = loop.now
    }

    /// Starts watching the lease; `hub.connect` calls it.
    func startLease() {
        loop.assertInEventLoop()
        scheduleLeaseCheck(at: leaseRenewedAt + hub.settings.leaseTTL)
    }

    private func scheduleLeaseCheck(at deadline: NIODeadline) {
        leaseTimer = loop.scheduleTask(deadline: deadline) { [self] in checkLease() }
    }

    private func checkLease() {
        guard !isEnded else { return }
        let deadline = leaseRenewedAt + hub.settings.leaseTTL
        if loop.now >= deadline {
            end(.leaseExpired)
        } else {
            scheduleLeaseCheck(at: deadline)
        }
    }
}

import FanoutProtocol
import Foundation
import NIOCore

/// Where a subscriber's token expires.
///
/// A subscriber admitted with a signed token holds its `Grant`, and one timer on its event loop
/// fires at the token's `exp`: the subscriber then ends with `.tokenExpired` (WebSocket close
/// 4003, an event stream's `token_expired`), unless a WebSocket client handed over a fresh token
/// (`refresh(with:)`) meanwhile, which moves the deadline. The operator's credential never
/// expires: no timer. Nothing here runs per event: the carts were decided once, at `subscribe`.
extension Subscriber {
    /// The longest one wait of the timer: a far `exp` is reached in steps, so no deadline
    /// overflows NIO's clock.
    static let longestExpiryWait: TimeInterval = 24 * 3_600

    /// Starts watching the token's expiry; `hub.connect` calls it.
    func startExpiry() {
        loop.assertInEventLoop()
        scheduleExpiryCheck()
    }

    /// Takes over a fresh token's `grant`, on the loop: it must be for the same `sub`, allow
    /// reading, and cover the subscription's carts; then the subscriber ends at its `exp`
    /// instead. Returns the error to tell the client otherwise, and nothing changes.
    func refresh(with fresh: Grant) -> FanoutError? {
        guard !isEnded else { return nil }
        guard let subject = grant.subject else {
            return FanoutError(.invalidToken, "this connection was not opened with a signed token: there is nothing to refresh")
        }
        guard fresh.subject == subject else {
            return FanoutError(.invalidToken, "a refresh must be a token for the same sub")
        }
        guard fresh.mayRead else {
            return FanoutError(.insufficientScope, "the new token may not read carts (its scope has no read)")
        }
        if phase != .connected, !fresh.covers(carts) {
            return FanoutError(.forbiddenCart, "the new token does not give access to every cart of this subscription")
        }
        grant = fresh
        scheduleExpiryCheck()
        return nil
    }

    /// Sets the timer for the token's `exp`, measured once against the wall clock and then
    /// kept by the loop's; a far `exp` is waited for in steps of `longestExpiryWait`.
    private func scheduleExpiryCheck() {
        expiryTimer?.cancel()
        expiryTimer = nil
        guard let expiresAt = grant.expiresAt else { return }
        let remaining = expiresAt.timeIntervalSinceNow
        let wait = max(0, min(remaining, Self.longestExpiryWait))
        expiryTimer = loop.scheduleTask(in: .nanoseconds(Int64(wait * 1e9))) { [self] in
            guard !isEnded else { return }
            if wait < Self.longestExpiryWait { end(.tokenExpired) } else { scheduleExpiryCheck() }
        }
    }
}

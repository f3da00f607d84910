import FanoutConcurrency
import FanoutProtocol
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Waiters for a commit after a seq: long-poll requests (`GET /events?since=N&wait=S`,
/// `FanoutHub.longPolls`), and catch-ups that have read the log further than the ring
/// (`FanoutHub.aheadOfRing`).
///
/// Bounded: at most `limit` wait at once; past that `park` refuses at once (a long-poll is
/// answered 503 `server_full`) rather than holding more. Each commit wakes the ones it is
/// after, which then read what they need themselves: nothing is buffered here but wake-ups.
final class CommitWaiters: Sendable {
    enum Outcome: Equatable {
        /// An event after `since` committed (or had already).
        case committed
        case timedOut
        /// `limit` requests were already waiting.
        case full
    }

    private struct Waiter {
        let after: Int64
        let continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var latestSeq: Int64
        var waiters: [Int: Waiter] = [:]
        var nextID = 0
        var shuttingDown = false
    }

    let limit: Int
    private let state: NIOLockedValueBox<State>

    init(limit: Int, latestSeq: Int64) {
        self.limit = limit
        state = NIOLockedValueBox(State(latestSeq: latestSeq))
    }

    /// How many are waiting now.
    var count: Int { state.withLockedValue { $0.waiters.count } }

    /// Waits until an event after `since` commits, or until `deadline`, or until the server
    /// begins to shut down.
    ///
    /// A long-poll is an HTTP request in flight, and the HTTP server, shut down first, waits for
    /// its requests to finish: without this, SIGTERM would wait up to a poll's whole `wait`. A
    /// request's task sees the server's graceful shutdown as soon as the server does, so the
    /// first poll to see it answers every waiting one (`shutDown`).
    func park(after since: Int64, until deadline: ContinuousClock.Instant) async -> Outcome {
        await withGracefulShutdownHandler {
            await parkUntilShutdown(after: since, until: deadline)
        } onGracefulShutdown: {
            self.shutDown()
        }
    }

    private func parkUntilShutdown(after since: Int64, until deadline: ContinuousClock.Instant) async -> Outcome {
        let id: Int? = state.withLockedValue { state in
            guard state.latestSeq <= since, !state.shuttingDown else { return nil }
            state.nextID += 1
            return state.nextID
        }
        guard let id else { return .committed }  // or shutting down: answer now, with what there is
        // At the deadline the wait is cancelled, which takes it off the list.
        let outcome = try? await Deadline.race(until: deadline, expired: { CancellationError() }) {
            await self.wait(id: id, after: since)
        }
        return outcome ?? .timedOut
    }

    /// On each commit: wakes every request waiting for an event up to `seq`.
    func committed(seq: Int64) {
        let woken: [Waiter] = state.withLockedValue { state in
            state.latestSeq = seq
            guard !state.waiters.isEmpty else { return [] }
            let due = state.waiters.filter { $0.value.after < seq }
            for id in due.keys { state.waiters[id] = nil }
            return Array(due.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    /// The server is shutting down: every waiting request is answered now (with what there is),
    /// and later ones do not wait.
    func shutDown() {
        let woken: [Waiter] = state.withLockedValue { state in
            state.shuttingDown = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in woken { waiter.continuation.resume() }
    }

    private func wait(id: Int, after since: Int64) async -> Outcome {
        let full = NIOLockedValueBox(false)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow: Bool = state.withLockedValue { state in
                    if Task.isCancelled || state.latestSeq > since || state.shuttingDown { return true }
                    if state.waiters.count >= limit {
                        full.withLockedValue { $0 = true }
                        return true
                    }
                    state.waiters[id] = Waiter(after: since, continuation: continuation)
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume()
        }
        if full.withLockedValue({ $0 }) { return .full }
        return state.withLockedValue { $0.latestSeq > since } ? .committed : .timedOut
    }
}

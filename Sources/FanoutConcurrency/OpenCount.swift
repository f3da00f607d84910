import NIOConcurrencyHelpers

/// How many of something are open now (a server's connections), and a wait for none to be:
/// the waiters are resumed by the close that brings it to zero, or at their deadline.
package final class OpenCount: Sendable {
    private struct State {
        var open = 0
        var waiters: [Int: CheckedContinuation<Bool, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// How many are open now.
    package var value: Int { state.withLockedValue(\.open) }

    /// How many wait for none to be open.
    package var waiting: Int { state.withLockedValue(\.waiters.count) }

    /// One more is open.
    package func opened() {
        state.withLockedValue { $0.open += 1 }
    }

    /// One closed; at zero, those waiting for it are resumed.
    package func closed() {
        let resumed = state.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            state.open -= 1
            guard state.open <= 0 else { return [] }
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in resumed { waiter.resume(returning: true) }
    }

    /// Returns once none is open, or at `deadline`, whichever comes first: true when none is
    /// open, false when the deadline came first.
    @discardableResult
    package func waitForNone(until deadline: ContinuousClock.Instant) async -> Bool {
        let id: Int? = state.withLockedValue { state in
            guard state.open > 0 else { return nil }
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        guard let id else { return true }
        let timer = Task {
            try? await Task.sleep(until: deadline)
            self.resume(id)
        }
        let noneOpen = await withCheckedContinuation { (waiter: CheckedContinuation<Bool, Never>) in
            let now: Bool? = state.withLockedValue { state in
                guard state.open > 0 else { return true }
                // Its deadline passed before it came to wait: the timer found nothing to resume.
                guard ContinuousClock.now < deadline else { return false }
                state.waiters[id] = waiter
                return nil
            }
            if let now { waiter.resume(returning: now) }
        }
        timer.cancel()
        return noneOpen
    }

    /// Resumes waiter `id`, if it still waits: its deadline came first.
    private func resume(_ id: Int) {
        state.withLockedValue { $0.waiters.removeValue(forKey: id) }?.resume(returning: false)
    }
}

import NIOConcurrencyHelpers
import Synchronization

/// The one way this package bounds a wait by a deadline: the server's long-polls and catch-ups
/// ahead of the ring, FanoutClient's HTTP requests, every use of a PostgreSQL connection.
package enum Deadline {
    /// What `work` returns or throws, unless `deadline` comes first: then what `expired`
    /// returns is thrown, and `work` is cancelled and left to end on its own. The caller is
    /// answered at the deadline even when `work` does not heed cancellation (PostgresNIO goes
    /// on waiting for an answer that never comes; `expired` may close what it waits on). A
    /// cancelled caller cancels `work`, and is answered when it ends or at the deadline.
    ///
    /// `work` runs on `executor` when one is given, which then also keeps the deadline (an
    /// event loop's timer); otherwise on Swift's global executor, the deadline kept by a task
    /// that sleeps until it (a dispatch timer, and a thread woken to cancel it).
    package static func race<T: Sendable>(
        until deadline: ContinuousClock.Instant,
        on executor: (any DeadlineExecutor)? = nil,
        expired: @escaping @Sendable () -> any Error,
        _ work: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let race = Race<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.caller.withLockedValue { $0 = continuation }
                let expire: @Sendable () -> Void = {
                    guard let caller = race.take() else { return }
                    race.worker.withLockedValue { $0 }?.cancel()
                    caller.resume(throwing: expired())
                }
                let cancelTimer: @Sendable () -> Void
                if let executor {
                    cancelTimer = executor.schedule(at: deadline, expire)
                } else {
                    let timer = Task {
                        try? await Task.sleep(until: deadline)
                        expire()
                    }
                    cancelTimer = { timer.cancel() }
                }
                let worker = Task(executorPreference: executor) {
                    let result: Result<T, any Error>
                    do {
                        result = .success(try await work())
                    } catch {
                        result = .failure(error)
                    }
                    guard let caller = race.take() else { return }
                    cancelTimer()
                    caller.resume(with: result)
                }
                race.worker.withLockedValue { $0 = worker }
                if race.cancelled.load(ordering: .acquiring) { worker.cancel() }
            }
        } onCancel: {
            race.cancelled.store(true, ordering: .releasing)
            race.worker.withLockedValue { $0 }?.cancel()
        }
    }

    /// What the caller, the timer and the worker share.
    private final class Race<T: Sendable>: Sendable {
        let caller = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
        let worker = NIOLockedValueBox<Task<Void, Never>?>(nil)
        let cancelled = Atomic(false)

        /// The caller, once: whoever takes it answers.
        func take() -> CheckedContinuation<T, any Error>? {
            caller.withLockedValue { caller in
                defer { caller = nil }
                return caller
            }
        }
    }
}

/// An executor that also keeps a deadline: `Deadline.race` runs its work here and has the
/// deadline kept here too (an event loop: its own timer, no thread of Swift's global executor
/// woken to set or cancel one).
package protocol DeadlineExecutor: TaskExecutor {
    /// Calls `fire` at `deadline`, unless the returned closure is called first.
    func schedule(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) -> @Sendable () -> Void
}

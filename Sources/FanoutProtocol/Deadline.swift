import Synchronization

/// The one way this package bounds a wait by a deadline: the server's long-polls and catch-ups
/// ahead of the ring, FanoutClient's HTTP requests, every use of a PostgreSQL connection.
package enum Deadline {
    /// What `work` returns or throws, unless `deadline` comes first: then what `expired`
    /// returns is thrown, and `work` is cancelled and left to end on its own. The caller is
    /// answered at the deadline even when `work` does not heed cancellation (PostgresNIO goes
    /// on waiting for an answer that never comes; `expired` may close what it waits on). A
    /// cancelled caller cancels `work`, and is answered when it ends or at the deadline.
    package static func race<T: Sendable>(
        until deadline: ContinuousClock.Instant,
        expired: @escaping @Sendable () -> any Error,
        _ work: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let race = Race<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.caller.withLock { $0 = continuation }
                let timer = Task {
                    try? await Task.sleep(until: deadline)
                    guard let caller = race.take() else { return }
                    race.worker.withLock { $0 }?.cancel()
                    caller.resume(throwing: expired())
                }
                let worker = Task {
                    let result: Result<T, any Error>
                    do {
                        result = .success(try await work())
                    } catch {
                        result = .failure(error)
                    }
                    guard let caller = race.take() else { return }
                    timer.cancel()
                    caller.resume(with: result)
                }
                race.worker.withLock { $0 = worker }
                if race.cancelled.load(ordering: .acquiring) { worker.cancel() }
            }
        } onCancel: {
            race.cancelled.store(true, ordering: .releasing)
            race.worker.withLock { $0 }?.cancel()
        }
    }

    /// What the caller, the timer and the worker share.
    private final class Race<T: Sendable>: Sendable {
        let caller = Mutex<CheckedContinuation<T, any Error>?>(nil)
        let worker = Mutex<Task<Void, Never>?>(nil)
        let cancelled = Atomic(false)

        /// The caller, once: whoever takes it answers.
        func take() -> CheckedContinuation<T, any Error>? {
            caller.withLock { caller in
                defer { caller = nil }
                return caller
            }
        }
    }
}

import NIOConcurrencyHelpers

/// What wakes a subscription's loop, seen from the loop: wait for the next wake-up, or run
/// something that the next wake-up interrupts (cancels). `wake()` is called synchronously by
/// whoever decides (the store's `SubscriptionDemand`), or by a listener of a `reconsider`
/// stream; a wake-up that finds nothing waiting or running is kept (one at most) for the next
/// wait or run.
package final class WakeUps: Sendable {
    private struct State {
        /// A wake-up came while nothing waited or ran: the next wait returns at once.
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
        var running: Task<Void, any Error>?
        /// The last `interrupting` call was interrupted.
        var interrupted = false
    }

    private let state = NIOLockedValueBox(State())
    private let listener: NIOLockedValueBox<Task<Void, Never>?> = NIOLockedValueBox(nil)

    /// Woken by `wake()` only.
    package init() {}

    /// Woken by each element of `stream` too.
    package convenience init(_ stream: AsyncStream<Void>) {
        self.init()
        let task = Task { [weak self] in
            for await _ in stream { self?.wake() }
        }
        listener.withLockedValue { $0 = task }
    }

    deinit {
        listener.withLockedValue { $0?.cancel() }
    }

    /// Ends a wait, or interrupts what runs, or (neither) is kept for the next one.
    package func wake() {
        state.withLockedValue { state in
            if let waiter = state.waiter {
                state.waiter = nil
                waiter.resume()
            } else if let running = state.running {
                state.interrupted = true
                running.cancel()
            } else {
                state.pending = true
            }
        }
    }

    /// Whether the last `interrupting` call was cut short by a wake-up.
    package var wokeUp: Bool { state.withLockedValue { $0.interrupted } }

    /// Returns at the next wake-up (or one kept), or when the task is cancelled.
    package func next() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                state.withLockedValue { state in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        continuation.resume()
                    } else {
                        state.waiter = continuation
                    }
                }
            }
        } onCancel: {
            state.withLockedValue { state in
                state.waiter?.resume()
                state.waiter = nil
            }
        }
    }

    /// Runs `body`; a wake-up meanwhile (or one kept) cancels it and sets `wokeUp`.
    package func interrupting(_ body: @escaping @Sendable () async throws -> Void) async throws {
        let task = Task { try await body() }
        state.withLockedValue { state in
            state.interrupted = false
            state.running = task
            if state.pending {
                state.pending = false
                state.interrupted = true
                task.cancel()
            }
        }
        defer { state.withLockedValue { $0.running = nil } }
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }
}

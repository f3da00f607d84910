import NIOConcurrencyHelpers

/// Mutations waiting for the engine's writer, committed a batch per transaction.
///
/// Concurrent callers of the store's mutations queue here. One drain at a time runs: it takes
/// up to `maxBatch` mutations into one transaction, where a refused or vetoed mutation writes
/// nothing (SQLite runs each in a savepoint and rolls it back alone; PostgreSQL plans the batch
/// in memory and writes only what passed, `PostgresBatch`), commits once — one sync for the
/// whole batch — then has the events delivered in seq order (on PostgreSQL by the follower) and
/// answers each caller. `Work` is what the engine runs per mutation. A caller is answered
/// only after the commit that holds its change, so what is acknowledged is as durable as with a
/// transaction per mutation; the batch only shares the sync.
///
/// At most `limit` mutations wait; beyond that a caller gets `overloaded` at once instead of
/// queueing without bound.
package final class GroupCommit<Work: Sendable>: Sendable {
    package struct Mutation: Sendable {
        /// What runs inside the batch's transaction: checks, validates and writes one change.
        package let work: Work
        package let caller: CheckedContinuation<CartCommit, any Error>
        /// When it was queued: an engine that bounds a caller's wait counts from here.
        package let queuedAt = ContinuousClock.now

        package init(work: Work, caller: CheckedContinuation<CartCommit, any Error>) {
            self.work = work
            self.caller = caller
        }
    }

    /// The most mutations one transaction carries.
    package static var maxBatch: Int { 64 }
    package let limit: Int
    private struct Queue {
        var waiting: [Mutation] = []
        var draining = false
        /// When the drain took (or started: `startBatch`) its current batch.
        var batchTakenAt: ContinuousClock.Instant?
        /// Whether the current batch was started before it was taken.
        var started = false
    }
    private let queue = NIOLockedValueBox(Queue())

    package init(limit: Int = 4_096) {
        self.limit = limit
    }

    /// Queues a mutation. Returns true when the caller must start a drain (none is running).
    package func enqueue(_ mutation: Mutation) throws -> Bool {
        try queue.withLockedValue { queue in
            guard queue.waiting.count < limit else {
                throw CartStoreError(.overloaded, "\(limit) changes are already waiting to be written; retry shortly")
            }
            queue.waiting.append(mutation)
            defer { queue.draining = true }
            return !queue.draining
        }
    }

    /// How long the batch being written has been under way; nil when the writer is idle. A
    /// batch takes milliseconds: one that has taken seconds is a writer stuck on its database,
    /// and every change queued behind it waits too (`CartStore.checkWritable`).
    package var batchUnderWayFor: Duration? {
        queue.withLockedValue { queue in queue.batchTakenAt.map { $0.duration(to: .now) } }
    }

    /// Mutations queued and not yet taken into a batch.
    package var waiting: Int { queue.withLockedValue { $0.waiting.count } }

    /// The next batch; nil (and the drain ends) when nothing waits. With `cutoff`, only the
    /// mutations queued by then (for a batch started with `startBatch` that failed before it
    /// was taken: those that waited for it hear of the failure, not the ones that came after).
    package func nextBatch(queuedBy cutoff: ContinuousClock.Instant? = nil) -> [Mutation]? {
        queue.withLockedValue { queue in
            guard !queue.waiting.isEmpty else {
                queue.draining = false
                queue.batchTakenAt = nil
                queue.started = false
                return nil
            }
            if !queue.started { queue.batchTakenAt = .now }
            queue.started = false
            let batch = Array(
                queue.waiting.prefix(Self.maxBatch).prefix { mutation in cutoff.map { mutation.queuedAt <= $0 } ?? true })
            queue.waiting.removeFirst(batch.count)
            return batch
        }
    }

    /// Starts the next batch without taking it, for an engine that takes its batch only once it
    /// can write it: the oldest waiting mutation's queue time (the batch's deadline counts from
    /// it), or nil (and the drain ends) when nothing waits. The drain then takes the batch with
    /// `nextBatch()`, which holds whatever waits by then: PostgreSQL's takes it once it holds
    /// the seq row, so the mutations that arrive while other servers' batches hold the row
    /// join this one instead of waiting for the next.
    package func startBatch() -> ContinuousClock.Instant? {
        queue.withLockedValue { queue in
            guard let oldest = queue.waiting.first else {
                queue.draining = false
                queue.batchTakenAt = nil
                return nil
            }
            queue.batchTakenAt = .now
            queue.started = true
            return oldest.queuedAt
        }
    }

    /// Takes the mutations queued at or before `cutoff` (the oldest, first in the queue): those
    /// that waited out their deadline, to be answered without being started.
    package func takeExpired(queuedBy cutoff: ContinuousClock.Instant) -> [Mutation] {
        queue.withLockedValue { queue in
            let count = queue.waiting.prefix { $0.queuedAt <= cutoff }.count
            defer { queue.waiting.removeFirst(count) }
            return Array(queue.waiting.prefix(count))
        }
    }
}

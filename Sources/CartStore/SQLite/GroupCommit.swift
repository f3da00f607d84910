import GRDB
import NIOConcurrencyHelpers
import Synchronization

/// Mutations waiting for the writer connection, committed a batch per transaction.
///
/// Concurrent callers of the store's mutations queue here. One drain at a time runs on the
/// writer: it takes up to `maxBatch` mutations, runs each in a savepoint of one transaction
/// (a refused or vetoed mutation rolls back alone), commits once — one WAL sync for the whole
/// batch — then delivers the events in seq order and answers each caller. A caller is answered
/// only after the commit that holds its change, so what is acknowledged is as durable as with a
/// transaction per mutation; the batch only shares the sync.
///
/// At most `limit` mutations wait; beyond that a caller gets `overloaded` at once instead of
/// queueing without bound.
final class GroupCommit: Sendable {
    struct Mutation: Sendable {
        /// Runs inside the batch's transaction: checks, validates and writes one change.
        let body: @Sendable (Database) throws -> CartCommit
        let caller: CheckedContinuation<CartCommit, any Error>
    }

    static let maxBatch = 64
    let limit: Int
    private struct Queue {
        var waiting: [Mutation] = []
        var draining = false
    }
    private let queue = NIOLockedValueBox(Queue())
    /// Transactions committed or attempted so far.
    let transactions = Atomic<Int>(0)

    init(limit: Int = 4_096) {
        self.limit = limit
    }

    /// Queues a mutation. Returns true when the caller must start a drain (none is running).
    func enqueue(_ mutation: Mutation) throws -> Bool {
        try queue.withLockedValue { queue in
            guard queue.waiting.count < limit else {
                throw CartStoreError(.overloaded, "\(limit) changes are already waiting to be written; retry shortly")
            }
            queue.waiting.append(mutation)
            defer { queue.draining = true }
            return !queue.draining
        }
    }

    var waitingCount: Int { queue.withLockedValue { $0.waiting.count } }

    /// The next batch; nil (and the drain ends) when nothing waits.
    func nextBatch() -> [Mutation]? {
        queue.withLockedValue { queue in
            guard !queue.waiting.isEmpty else {
                queue.draining = false
                return nil
            }
            let batch = Array(queue.waiting.prefix(Self.maxBatch))
            queue.waiting.removeFirst(batch.count)
            return batch
        }
    }

    /// Commits the bodies in one transaction, each in a savepoint. Returns each one's outcome,
    /// in order; throws when the transaction itself failed, and then nothing of the batch was
    /// written.
    func commit(_ bodies: [@Sendable (Database) throws -> CartCommit], _ db: Database) throws -> [Result<CartCommit, any Error>] {
        transactions.add(1, ordering: .relaxed)
        var outcomes: [Result<CartCommit, any Error>] = []
        outcomes.reserveCapacity(bodies.count)
        try db.inTransaction(.immediate) {
            for body in bodies {
                do {
                    outcomes.append(.success(try Self.inSavepoint(db) { try body(db) }))
                } catch {
                    // Some SQLite errors (disk full, I/O) roll the whole transaction back: then
                    // the batch's earlier changes are gone too, and it fails as one.
                    guard db.isInsideTransaction else { throw error }
                    outcomes.append(.failure(error))
                }
            }
            return .commit
        }
        return outcomes
    }

    /// Runs `body` in a savepoint: released when it returns, rolled back when it throws. The
    /// three statements are prepared once per connection (GRDB's `inSavepoint` parses them on
    /// every call).
    private static func inSavepoint<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try db.cachedStatement(sql: "SAVEPOINT mutation").execute()
        let result: T
        do {
            result = try body()
        } catch {
            // A failed statement may already have rolled the whole transaction back; then
            // there is no savepoint left, and the caller sees the transaction gone.
            if db.isInsideTransaction {
                try db.cachedStatement(sql: "ROLLBACK TO SAVEPOINT mutation").execute()
                try db.cachedStatement(sql: "RELEASE SAVEPOINT mutation").execute()
            }
            throw error
        }
        try db.cachedStatement(sql: "RELEASE SAVEPOINT mutation").execute()
        return result
    }
}

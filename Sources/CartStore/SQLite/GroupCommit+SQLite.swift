import GRDB

/// What the SQLite engine runs per mutation inside a batch's transaction.
typealias SQLiteWork = @Sendable (Database) throws -> CartCommit

extension GroupCommit where Work == SQLiteWork {
    /// Commits the bodies in one transaction, each in a savepoint. Returns each one's outcome,
    /// in order; throws when the transaction itself failed, and then nothing of the batch was
    /// written. Its statements are prepared once per connection, like the savepoints' (GRDB's
    /// `inTransaction` parses BEGIN and COMMIT on every call). `willCommit` runs just before the
    /// COMMIT, whose end makes the batch visible to readers.
    func commit(
        _ bodies: [@Sendable (Database) throws -> CartCommit], _ db: Database, willCommit: () -> Void = {}
    ) throws -> [Result<CartCommit, any Error>] {
        var outcomes: [Result<CartCommit, any Error>] = []
        outcomes.reserveCapacity(bodies.count)
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
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
            willCommit()
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
        } catch {
            if db.isInsideTransaction { try? db.rollback() }
            throw error
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

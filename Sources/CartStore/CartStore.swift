import Foundation
import GRDB

/// Shopping carts persisted in SQLite, with a durable event log and weakly held observers.
///
/// Every mutation changes the cart rows and appends one event to `cart_events` atomically (a
/// savepoint; concurrent mutations share one transaction and one sync, see `GroupCommit`); the
/// event's `seq` is strictly increasing and gap-free. After the commit, and in seq order, the
/// event is delivered to `observers`. Invalid input and vetoed changes
/// throw a `CartStoreError` (or the validator's error) and write nothing.
///
/// The API is `async`: callers never block a thread on SQLite, and an observer callback, which
/// is synchronous, cannot call back into the store while the store is writing.
public final class CartStore: Sendable {
    /// What a successful return promises about surviving crashes.
    public enum Durability: Sendable {
        /// Every commit is synced to disk before it returns: survives power loss.
        case full
        /// Commits survive a crash or `kill -9` of the process, but the last ones may be lost
        /// on power loss. Faster: the WAL is synced at checkpoints only.
        case normal
    }

    /// The observers of this store, held weakly. Add yours with `observers.add(_:queue:)`.
    public let observers = ObserverSet()

    let writer: any DatabaseWriter
    /// Mutations waiting for `writer`, committed in batches.
    let commits: GroupCommit
    /// The database file's owner lock, for stores opened at a path.
    private let fileLock: DatabaseFileLock?

    /// Opens (creating if needed) the database at `path` in WAL mode, migrates it, and checks
    /// that it can be written.
    ///
    /// - Throws: `CartStoreError`: `databaseInUse` when another store, in this process or
    ///   another, has it open; `notAFanoutDatabase` for another program's file (left untouched);
    ///   `schemaTooNew` for a database written by a newer version; `storeUnavailable` when it
    ///   cannot be opened or written, `storageFull` when the disk is full.
    public convenience init(path: String, durability: Durability = .full) throws {
        try Schema.refuseForeignDatabase(at: path)
        let fileLock = try DatabaseFileLock(databasePath: path)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        let pool: DatabasePool
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
        } catch {
            throw CartStoreError.storage(error)
        }
        // Set after opening: GRDB's WAL set-up runs `PRAGMA synchronous = NORMAL` on the writer
        // connection after `prepareDatabase`. Only the writer commits, so only it matters.
        try pool.writeWithoutTransaction { db in
            switch durability {
            case .full: try db.execute(sql: "PRAGMA synchronous = FULL")
            case .normal: try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
        }
        try self.init(writer: pool, fileLock: fileLock)
        try checkWritable(writer)
    }

    /// A store in memory, gone when released. For tests and tools.
    public static func inMemory() throws -> CartStore {
        try CartStore(writer: DatabaseQueue())
    }

    /// - Parameter commitLimit: how many mutations may wait for the writer (see `GroupCommit`).
    init(writer: any DatabaseWriter, commitLimit: Int = 4_096, fileLock: DatabaseFileLock? = nil) throws {
        self.writer = writer
        self.commits = GroupCommit(limit: commitLimit)
        self.fileLock = fileLock
        do {
            try Schema.migrate(writer)
        } catch {
            throw CartStoreError.storage(error)
        }
    }

    /// Checks that a change could be written now (a write rolled back at once); throws
    /// `storeUnavailable` or `storageFull` otherwise. `/healthz` asks it.
    public func checkWritable() async throws {
        try await writer.writeWithoutTransaction { db in try Self.probeWrite(db) }
    }

    private func checkWritable(_ writer: any DatabaseWriter) throws {
        try writer.writeWithoutTransaction { db in try Self.probeWrite(db) }
    }

    private static func probeWrite(_ db: Database) throws {
        do {
            try db.inTransaction(.immediate) {
                try db.execute(sql: "CREATE TABLE fanout_write_probe (x)")
                return .rollback
            }
        } catch {
            throw CartStoreError.storage(error)
        }
    }

    /// The names of the schema migrations this build carries, in the order they apply.
    public static var schemaMigrations: [String] { Schema.migrations.map(\.name) }

    /// Closes the database. Later calls fail; pending writes have finished when this returns.
    public func close() throws {
        if let pool = writer as? DatabasePool {
            try pool.close()
        } else if let queue = writer as? DatabaseQueue {
            try queue.close()
        }
        fileLock?.release()
    }
}

import Foundation
import GRDB

extension CartStore {
    /// What a backup holds.
    public struct Backup: Sendable, Equatable {
        /// The seq of the newest event the copy holds.
        public let latestSeq: Int64
        /// Its database's identity: the original's (a restored copy is the same database).
        public let databaseID: String
    }

    /// Copies the SQLite database at `path` to `destination`, a new file, while a server may be
    /// writing it: SQLite's online backup of one consistent moment (every change committed
    /// before it, none after, the event log gap-free), without the store's lock, so the server
    /// goes on. The copy is checked (`PRAGMA quick_check`) and its identity and seq read back.
    ///
    /// - Throws: `storeUnavailable` when `path` has no database or is a PostgreSQL URL (use
    ///   `pg_dump`), or when `destination` exists already (nothing is overwritten);
    ///   `notAFanoutDatabase` for another program's database; the copy's own errors.
    public static func backup(databaseAt path: String, to destination: String) throws -> Backup {
        guard !isPostgresURL(path) else {
            throw CartStoreError(.storeUnavailable, "a PostgreSQL database is backed up with pg_dump (docs/OPERATING.md, Backups)")
        }
        guard FileManager.default.fileExists(atPath: path) else {
            throw CartStoreError(.storeUnavailable, "there is no database at \(path)")
        }
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw CartStoreError(.storeUnavailable, "\(destination) exists already: a backup never overwrites a file")
        }
        try Schema.refuseForeignDatabase(at: path)
        do {
            var reading = Configuration()
            reading.readonly = true
            reading.busyMode = .timeout(10)
            let source = try DatabaseQueue(path: path, configuration: reading)
            let copy = try DatabaseQueue(path: destination)
            try source.backup(to: copy)
            try source.close()
            // The copy checked: whole, and its identity and newest seq read back.
            let check = try copy.read { db in try String.fetchOne(db, sql: "PRAGMA quick_check") }
            guard check == "ok" else { throw CartStoreError(.storeUnavailable, "the copy fails SQLite's check: \(check ?? "no answer")") }
            let backup = Backup(latestSeq: try copy.read(SQLiteBackend.latestSeq), databaseID: try Schema.databaseID(copy))
            try copy.close()
            return backup
        } catch {
            for suffix in ["", "-wal", "-shm", "-journal"] { try? FileManager.default.removeItem(atPath: destination + suffix) }
            throw error is CartStoreError ? error : CartStoreError.storage(error)
        }
    }
}

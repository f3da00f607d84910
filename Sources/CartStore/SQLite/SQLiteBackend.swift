import Foundation
import GRDB
import NIOConcurrencyHelpers
import Synchronization

/// The SQLite engine (GRDB over the system libsqlite3): one file in WAL mode, one writer
/// connection that commits mutations in batches (`GroupCommit`), readers for snapshots and
/// the log.
///
/// Delivery is the writer's: after each batch commits, and before the next starts, its events
/// go to the store's observers in seq order, and only then are the callers answered.
final class SQLiteBackend: CartStoreBackend {
    let writer: any DatabaseWriter
    /// Mutations waiting for `writer`, committed in batches.
    let commits: GroupCommit<SQLiteWork>
    /// The database file's owner lock, for stores opened at a path.
    private let fileLock: DatabaseFileLock?
    /// Why the last batch could not be written for want of room (`storageFull`), until a write
    /// commits again. A probe that rolls back needs no room, so without this `/healthz` would
    /// say yes on a full disk while every write is refused. Read and written on the writer only.
    private let lacksRoom = Atomic<Bool>(false)
    /// Where committed events go (`start`).
    private let sink = NIOLockedValueBox<EventSink?>(nil)
    /// Connections for small reads on the caller's thread; a pool's file only (a queue's
    /// reads wait for its writer).
    let smallReaders: SmallReaders?
    /// The newest committed events, appended by the writer after each commit: the log's tail
    /// without a read.
    let recent = RecentEvents()
    /// The database's identity, read once it is migrated.
    let databaseID: String
    let migrationsApplied: [String]
    var schemaVersion: String { Schema.migrations.last?.name ?? "" }

    /// Opens (creating if needed) the database at `path` in WAL mode, migrates it, and checks
    /// that it can be written (see `CartStore.init(path:durability:)` for the errors).
    convenience init(path: String, durability: CartStore.Durability) throws {
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
            // The write-ahead log stays small: copied into the database once it holds
            // `logPages` pages, and its file cut back to that size after, so that the room a
            // checkpoint needs (the database growing by the log's new pages) stays small too,
            // and a full disk gives its room back once about that much is free.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(Self.logPages)")
            try db.execute(sql: "PRAGMA journal_size_limit = \(Self.logPages * 4_096)")
        }
        try self.init(writer: pool, fileLock: fileLock)
        try writer.writeWithoutTransaction { db in try Self.probeWrite(db) }
    }

    /// The pages the write-ahead log holds before it is copied into the database (SQLite's
    /// default is 1 000): 1 MiB of 4 KiB pages.
    static let logPages = 256

    /// - Parameter commitLimit: how many mutations may wait for the writer (see `GroupCommit`).
    init(writer: any DatabaseWriter, commitLimit: Int = 4_096, fileLock: DatabaseFileLock? = nil) throws {
        self.writer = writer
        self.smallReaders = (writer as? DatabasePool).map { SmallReaders(of: $0) }
        self.commits = GroupCommit(limit: commitLimit)
        self.fileLock = fileLock
        do {
            migrationsApplied = try Schema.migrate(writer)
            databaseID = try Schema.databaseID(writer)
        } catch {
            throw CartStoreError.storage(error)
        }
    }

    /// Whether a write would go through now: a probe that commits as much as a mutation writes
    /// (`probeWrite(committed:)`), so that a disk with room for a rolled-back probe but not for
    /// a change is reported full. A refused write (`lacksRoom`) first gives the log's room back.
    func checkWritable() async throws {
        try await writer.writeWithoutTransaction { db in
            if lacksRoom.load(ordering: .relaxed) { Self.shrinkLog(db) }
            do {
                try Self.probeWrite(db, committed: true)
            } catch {
                noteLackOfRoom(error, db)
                throw error
            }
            lacksRoom.store(false, ordering: .relaxed)
        }
    }

    /// What a committed probe writes: as many bytes as a mutation's rows and indexes take in
    /// the write-ahead log (about 8 pages), so that it fits where a mutation fits.
    static let probeBytes = 32 * 1024

    /// A write that lasts, or not: a table created and filled with `probeBytes` (and, when
    /// `committed`, dropped in the same transaction), rolled back at once unless `committed`.
    /// Only a committed one takes room in the write-ahead log, as a mutation does.
    private static func probeWrite(_ db: Database, committed: Bool = false) throws {
        do {
            try db.inTransaction(.immediate) {
                try db.execute(sql: "CREATE TABLE fanout_write_probe (x)")
                guard committed else { return .rollback }
                try db.execute(sql: "INSERT INTO fanout_write_probe VALUES (zeroblob(?))", arguments: [probeBytes])
                try db.execute(sql: "DROP TABLE fanout_write_probe")
                return .commit
            }
        } catch {
            throw CartStoreError.storage(error)
        }
    }

    /// Copies the write-ahead log into the database and truncates it to nothing, giving its
    /// room back to the disk: after a write failed for want of room (a log that cannot grow
    /// would otherwise keep the room it has), and at close. A reader still on an old snapshot
    /// can keep part of it; what could not be copied is copied at the next attempt.
    private static func shrinkLog(_ db: Database) {
        _ = try? db.checkpoint(.truncate)
    }

    func close() throws {
        // Later reads fail, as the file's do, rather than answer from memory.
        recent.forgetAll()
        smallReaders?.close()
        writer.writeWithoutTransaction { db in Self.shrinkLog(db) }
        if let pool = writer as? DatabasePool {
            try pool.close()
        } else if let queue = writer as? DatabaseQueue {
            try queue.close()
        }
        fileLock?.release()
    }

    // MARK: Mutations

    /// Keeps `sink`: the writer delivers each batch's events to it after the batch commits.
    func start(delivering sink: EventSink) {
        self.sink.withLockedValue { $0 = sink }
    }

    var waitingChanges: Int { commits.waiting }

    var engineName: String { "sqlite" }

    var batchUnderWayFor: Duration? { commits.batchUnderWayFor }

    /// None kept: a local file's failures name nothing an outsider should not see.
    var lastProblem: StoreProblem? { nil }

    /// Every commit is delivered before the mutation returns: the newest committed.
    func deliveredSeq() async throws -> Int64 {
        try await latestSeq()
    }

    /// Queues the mutation for the writer; the caller is answered after the batch holding it
    /// has committed and its events were delivered.
    func commit(_ mutation: CartMutation) async throws -> CartCommit {
        try await withCheckedThrowingContinuation { caller in
            let queued = GroupCommit<SQLiteWork>.Mutation(
                work: { db in
                    try Self.apply(mutation, db)
                }, caller: caller)
            do {
                if try commits.enqueue(queued) {
                    writer.asyncWriteWithoutTransaction { db in self.drainCommits(db) }
                }
            } catch {
                caller.resume(throwing: error)
            }
        }
    }

    /// On the writer: commits waiting mutations a batch at a time until none is left. After 16
    /// batches it queues itself again behind the writer's other work (reads of the writer
    /// connection, pruning), so that a steady stream of mutations cannot starve them.
    private func drainCommits(_ db: Database) {
        let sink = self.sink.withLockedValue { $0 }
        for _ in 0..<16 {
            guard let batch = commits.nextBatch() else { return }
            let outcomes: [Result<CartCommit, any Error>]
            do {
                outcomes = try commits.commit(batch.map(\.work), db, willCommit: recent.willCommit).map {
                    $0.mapError(CartStoreError.storage)
                }
            } catch {
                recent.commitFailed()
                let error = CartStoreError.storage(error)
                noteLackOfRoom(error, db)
                for mutation in batch { mutation.caller.resume(throwing: error) }
                continue
            }
            // A repeated key's answer is an earlier commit's: nothing new to deliver.
            let events = outcomes.compactMap { outcome in (try? outcome.get()).flatMap { $0.isReplay ? nil : $0.event } }
            recent.didCommit(events)
            for event in events { sink?.deliver(event) }
            for (mutation, outcome) in zip(batch, outcomes) {
                if case .failure(let error) = outcome { noteLackOfRoom(error, db) }
                mutation.caller.resume(with: outcome)
            }
            if lacksRoom.load(ordering: .relaxed), outcomes.contains(where: { (try? $0.get()) != nil }) {
                lacksRoom.store(false, ordering: .relaxed)
            }
        }
        // Still draining (the flag stays set): carry on after whatever else waits.
        writer.asyncWriteWithoutTransaction { db in self.drainCommits(db) }
    }

    /// Remembers a write refused for want of room, and gives the log's room back to the disk.
    private func noteLackOfRoom(_ error: any Error, _ db: Database) {
        guard (error as? CartStoreError)?.code == .storageFull else { return }
        lacksRoom.store(true, ordering: .relaxed)
        Self.shrinkLog(db)
    }

    /// One mutation, inside the batch's transaction: its key looked up (a repeat is answered
    /// from it and writes nothing), the cart read, the plan, its rows written, and its key kept.
    private static func apply(_ mutation: CartMutation, _ db: Database) throws -> CartCommit {
        if let keyed = mutation.keyed, let remembered = try rememberedCommit(keyed.key, db) {
            return try remembered.answer(to: keyed)
        }
        let plan = try mutation.plan(stored: try loadCart(mutation.cartID, db), committedAt: Date().millisecondsSince1970)
        let event = plan.event
        // Every statement of a mutation is prepared once per connection and reused: parsing
        // and planning SQL was a sixth of a mutation's CPU.
        try db.cachedStatement(
            sql: """
                INSERT INTO cart_events (cart_id, kind, change, cart_version, committed_at, idempotency_key) VALUES (?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            event.cartID, event.kind.rawValue, plan.encodedChange, event.version, plan.committedAt, event.idempotencyKey,
        ])
        let seq = db.lastInsertedRowID
        try db.cachedStatement(
            sql: """
                INSERT INTO carts (id, version) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version
                """
        ).execute(arguments: [event.cartID, plan.after.version])
        try write(event.change, of: event.cartID, position: seq, db)
        let commit = plan.committed(seq: seq)
        if let (keyed, remembered) = mutation.remembered(commit) {
            try db.cachedStatement(
                sql: """
                    INSERT INTO idempotency_keys (scope, key, fingerprint, seq, answer, created_at) VALUES (?, ?, ?, ?, ?, ?)
                    """
            ).execute(arguments: [
                keyed.key.scope, keyed.key.key, remembered.fingerprint, seq, remembered.commit, plan.committedAt,
            ])
        }
        return commit
    }

    /// The commit kept with `key`, if it is kept.
    private static func rememberedCommit(_ key: IdempotencyKey, _ db: Database) throws -> RememberedCommit? {
        let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT fingerprint, answer FROM idempotency_keys WHERE scope = ? AND key = ?"),
            arguments: [key.scope, key.key])
        return row.map { RememberedCommit(fingerprint: $0[0], commit: $0[1]) }
    }

    private static func write(_ change: CartChange, of cartID: String, position: Int64, _ db: Database) throws {
        switch change {
        case .itemAdded(let item, _):
            // Upsert that keeps an existing line's position.
            try db.cachedStatement(
                sql: """
                    INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position)
                    VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (cart_id, sku) DO UPDATE SET
                        quantity = excluded.quantity,
                        unit_price_cents = excluded.unit_price_cents,
                        name = excluded.name
                    """
            ).execute(arguments: [cartID, item.sku, item.quantity, item.unitPriceCents, item.name, position])
        case .quantityChanged(let sku, let quantity):
            try db.cachedStatement(sql: "UPDATE cart_items SET quantity = ? WHERE cart_id = ? AND sku = ?")
                .execute(arguments: [quantity, cartID, sku])
        case .itemRemoved(let sku):
            try db.cachedStatement(sql: "DELETE FROM cart_items WHERE cart_id = ? AND sku = ?")
                .execute(arguments: [cartID, sku])
        case .cartCleared:
            try db.cachedStatement(sql: "DELETE FROM cart_items WHERE cart_id = ?").execute(arguments: [cartID])
        }
    }
}

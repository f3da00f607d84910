import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Shopping carts with a durable event log and weakly held observers, kept in SQLite (one file,
/// one server) or PostgreSQL (one database, several servers).
///
/// Every mutation changes the cart rows and appends one event to the log in the same
/// transaction (concurrent mutations share one transaction and one sync, see `GroupCommit`; a
/// refused one writes nothing: on SQLite each runs in a savepoint, on PostgreSQL the batch is
/// planned in memory and only what passed is written); the event's `seq` is strictly
/// increasing and gap-free. The engine is a
/// `CartStoreBackend` (`SQLiteBackend`, or CartStorePostgres's `PostgresBackend`, opened by
/// `PostgresCartStore`); the input checks, the plan of a
/// change (`CartMutation`), validators and delivery are the same for both. After the commit,
/// and in seq order, the event is delivered to `observers` (on PostgreSQL, every store on the
/// database delivers every commit, its own and the others'). Invalid input and vetoed changes
/// throw a `CartStoreError` (or the validator's error) and write nothing.
///
/// Its carts are observed as a `RemoteCartStore`'s are: a `CartObserver` added with
/// `observers.add(_:carts:queue:)` is told its carts' state, then every later change of them.
///
/// The API is `async`: changes and large reads wait without holding a thread (small reads of
/// SQLite, tens of microseconds, run on the caller's thread: `SmallReaders`), and an observer
/// callback, which is synchronous, cannot call back into the store while the store is writing.
public final class CartStore: CartSource, CartWriter {
    /// What a successful return promises about surviving crashes.
    public enum Durability: Sendable {
        /// Every commit is synced to disk before it returns: survives power loss.
        case full
        /// Commits survive a crash or `kill -9` of the process, but the last ones may be lost
        /// on power loss. Faster: the WAL is synced at checkpoints only.
        case normal
    }

    /// The observers of this store, held weakly: `CartObserver`s, added with
    /// `observers.add(_:carts:queue:)`, and the low-level `CartStoreObserver`s.
    public let observers: Observers

    /// The most commits that wait for one `CartObserver` while its carts' state is read; past
    /// it they are dropped and the state read again (`Observers.add(_:carts:queue:)`).
    public static let followerBufferLimit = 1_024

    /// The storage engine: what keeps the rows and the log, and commits.
    package let backend: any CartStoreBackend
    /// The seqs of the last writes made through `write(_:to:expectedVersion:)`, for `outcome(of:)`.
    let writeOutcomes = NIOLockedValueBox(RecentWriteOutcomes())

    /// Opens (creating if needed) the SQLite database at `path` in WAL mode, migrates it, and
    /// checks that it can be written.
    ///
    /// - Throws: `CartStoreError`: `databaseInUse` when another store, in this process or
    ///   another, has it open; `notAFanoutDatabase` for another program's file (left untouched);
    ///   `schemaTooNew` for a database written by a newer version; `storeUnavailable` when it
    ///   cannot be opened or written, `storageFull` when the disk is full.
    public convenience init(path: String, durability: Durability = .full) throws {
        self.init(backend: try SQLiteBackend(path: path, durability: durability))
    }

    /// A store in memory, gone when released. For tests and tools.
    public static func inMemory() throws -> CartStore {
        CartStore(backend: try SQLiteBackend(writer: DatabaseQueue()))
    }

    /// A SQLite store on a connection the caller made (tests: a read-only pool, a small
    /// commit limit).
    convenience init(writer: any DatabaseWriter, commitLimit: Int = 4_096) throws {
        self.init(backend: try SQLiteBackend(writer: writer, commitLimit: commitLimit))
    }

    /// A store on `backend`, which delivers its commits to the store's observers from now on.
    package init(backend: any CartStoreBackend) {
        self.backend = backend
        observers = Observers()
        observers.attach(to: self)
        // The engine gets a sink, not the store: it holds the store weakly.
        backend.start(delivering: EventSink { [weak self] event in self?.deliver(event) })
    }

    /// Whether `location` names a PostgreSQL database (`postgres://…` or `postgresql://…`)
    /// rather than a SQLite file.
    public static func isPostgresURL(_ location: String) -> Bool {
        location.hasPrefix("postgres://") || location.hasPrefix("postgresql://")
    }

    /// A database location (a SQLite path, or a PostgreSQL URL) as it may be printed or
    /// logged: a URL's password replaced by `***`.
    public static func printableLocation(_ location: String) -> String {
        guard isPostgresURL(location), var url = URLComponents(string: location), url.password != nil else { return location }
        url.password = "***"
        return url.string ?? "a PostgreSQL URL"
    }

    /// The newest seq delivered to the observers so far, without asking the database: an
    /// observer added now hears of every event after it (on PostgreSQL, other servers' commits
    /// since arrive in order).
    public func deliveredSeq() async throws -> Int64 {
        try await backend.deliveredSeq()
    }

    /// Changes queued for the writer now, not yet in a transaction (at most the commit limit,
    /// 4 096; past it a change is refused as `overloaded`): how far the writer is behind.
    public var waitingChanges: Int { backend.waitingChanges }

    /// Which engine keeps the data: `sqlite` or `postgresql`.
    public var engineName: String { backend.engineName }

    /// The identity of the database: a UUID string (lower case) made once, when the database was
    /// created, or for a database made before identities when this version first migrated it;
    /// kept in the database and never changed. Every store on one PostgreSQL database has the
    /// same one; a new or reset database has another, though its seqs may be in the same range. A
    /// restored backup keeps the identity of the database it was taken from.
    public var databaseID: String { backend.databaseID }

    /// The schema migrations that opening the database applied, in order: all of them for a
    /// new database, none for one already current (`fanout-server`'s start line says which).
    public var migrationsApplied: [String] { backend.migrationsApplied }

    /// The newest migration of the engine's schema: what the database is at once open.
    public var schemaVersion: String { backend.schemaVersion }

    /// Checks that a change would be written now; throws `storeUnavailable` or `storageFull`
    /// otherwise. `/healthz` asks it.
    ///
    /// A writer that has been on one batch for more than `stuckWriter` is stuck on its
    /// database, and a change now would wait behind it: `storeUnavailable`. Otherwise the
    /// engine probes as a change would write: SQLite commits as much as a change does,
    /// PostgreSQL takes the seq row in a transaction of its own.
    public func checkWritable() async throws {
        if let underWay = backend.batchUnderWayFor, underWay > Self.stuckWriter {
            let seconds = Double(underWay.components.seconds) + Double(underWay.components.attoseconds) / 1e18
            throw CartStoreError(
                .storeUnavailable,
                "changes are not being written: the one under way has waited \(String(format: "%.1f", seconds)) s for the database")
        }
        try await backend.checkWritable()
    }

    /// How long a batch may be under way before `checkWritable` calls the writer stuck (a batch
    /// takes milliseconds).
    public static let stuckWriter: Duration = .seconds(1)

    /// The newest failure of the database, naming it, for the operator (`/stats`): the errors
    /// callers get say "the database" instead. Nil when there was none.
    public var lastProblem: StoreProblem? { backend.lastProblem }

    /// The names of the schema migrations this build carries, in the order they apply.
    public static var schemaMigrations: [String] { Schema.migrations.map(\.name) }

    /// A local store's carts are its own: `live` until `close()`, then `closed`.
    public var connectionState: CartConnectionState {
        observers.isClosed ? .closed : .live
    }

    /// Closes the database. Later calls fail; pending writes have finished when this returns.
    /// Every `CartObserver` is told `closed` (on its queue, its last callback).
    public func close() throws {
        defer { observers.close(store: self) }
        try backend.close()
    }
}

import CartStore
import Logging
import PostgresNIO
import ServiceLifecycle

/// A `CartStore` in a PostgreSQL database, and what keeps it working (its connection pool and
/// its follower, which delivers every commit made there, by any server, to `store`'s observers)
/// as one `Service` that its opener runs — in a service group, as `fanout-server` does, or in a
/// task — as a `PostgresClient` is run. Tools and tests that want a store for a while use
/// `CartStore.withPostgres(url:_:)`, which runs it for them.
///
/// Its initialiser connects to the database on a connection of its own, migrates it, reads
/// where its log stands, and closes that connection. The connection pool and the follower run
/// only in `run()`: until then nothing is delivered, and a change waits for it (at most its
/// deadline, then `storeUnavailable`). `run()` returns
/// when its task is cancelled, when the service group shuts down, or when `store` is closed.
/// Several stores (several servers) may share one database.
public final class PostgresCartStore: Service, Sendable {
    /// The store: changes, reads and observers, as on SQLite.
    public let store: CartStore
    /// The engine (`shared`: what other services of the server use of it).
    let backend: PostgresBackend

    /// How long one use of the database may take by default, from asking for a connection to
    /// the last row: 4 s. Far above a healthy server's time, even a loaded one's; low enough
    /// that a caller hears within the 5 s docs/OPERATING.md promises (503 `store_unavailable`
    /// while the database is away).
    public static let defaultDeadline: Duration = .seconds(4)

    /// Connects to the database at `url` (`postgres://user[:password]@host[:port]/database`),
    /// migrates it, and reads where its log stands, on a connection of its own.
    ///
    /// - Parameters:
    ///   - url: The database.
    ///   - deadline: How long one use of the database may take, from asking for a connection
    ///     to the last row: a change still unanswered then is answered `storeUnavailable`
    ///     (nothing was written, or it may or may not have been made when its COMMIT went out).
    ///     A database on a slow network, or a machine that is often overloaded, may want more.
    /// - Throws: `CartStoreError`: `storeUnavailable` when the database cannot be reached or
    ///   written, `notAFanoutDatabase` for a database with another program's tables,
    ///   `schemaTooNew` for one migrated by a newer version.
    public init(url: String, deadline: Duration = defaultDeadline) async throws {
        backend = try await PostgresBackend.open(url: url, deadline: deadline)
        store = CartStore(backend: backend)
    }

    /// Runs the connection pool and the follower until the task is cancelled, the service
    /// group shuts down, or `store` is closed.
    public func run() async throws {
        await backend.run()
    }
}

extension CartStore {
    /// Opens the store in the PostgreSQL database at `url`, runs it while `body` uses it, and
    /// closes it when `body` returns or throws (observers are told `closed`).
    ///
    /// - Parameters:
    ///   - url: The database.
    ///   - deadline: How long one use of the database may take (`PostgresCartStore.init(url:deadline:)`).
    ///   - body: What uses the store.
    /// - Throws: what `PostgresCartStore.init(url:deadline:)` throws, or what `body` throws.
    public static func withPostgres<Result: Sendable>(
        url: String, deadline: Duration = PostgresCartStore.defaultDeadline, _ body: (CartStore) async throws -> Result
    ) async throws -> Result {
        let postgres = try await PostgresCartStore(url: url, deadline: deadline)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await postgres.run() }
            let result: Swift.Result<Result, any Error>
            do {
                result = .success(try await body(postgres.store))
            } catch {
                result = .failure(error)
            }
            try? postgres.store.close()
            try? await group.waitForAll()
            return try result.get()
        }
    }
}

/// The store's database as a service beside it uses it (the server's shared presence): the
/// same connections, deadline, LISTEN session and logger, so that it costs the database no
/// session of its own and is answered, or refused, by the same deadline as a change.
extension PostgresCartStore {
    /// The store's logger.
    package var logger: Logger { backend.logger }

    /// Whether the store was closed: a service beside it ends.
    package var isClosed: Bool { backend.isClosed }

    /// How long one use of the database may take.
    package var deadline: Duration { backend.connections.timeout }

    /// Hears NOTIFYs on `channel` through the store's LISTEN session: each payload, and nil
    /// each time the session starts listening (again). Until the returned closure is called.
    package func listen(on channel: String, _ heard: @escaping @Sendable (String?) -> Void) -> @Sendable () -> Void {
        backend.listen(on: channel, heard)
    }

    /// One prepared statement on a pooled connection, its rows collected, by the deadline.
    package func execute<Statement: PostgresPreparedStatement & Sendable>(
        _ statement: Statement, logger: Logger
    ) async throws -> [Statement.Row] where Statement.Row: Sendable {
        try await backend.connections.execute(statement, logger: logger)
    }

    /// `body` with a pooled connection, by `deadline` (a session the database ended is passed
    /// over, as for the store's own uses).
    package func withConnection<T: Sendable>(
        until deadline: ContinuousClock.Instant, _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await backend.connections.withConnection(until: deadline, body)
    }

    /// A PostgreSQL error as the store's logs say it (SQLSTATE and message, never a password).
    package static func describe(_ error: any Error) -> String {
        PostgresBackend.describe(error)
    }
}

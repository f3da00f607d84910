import CartStore
import EventLoopExecutor
import FanoutConcurrency
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// The PostgreSQL engine (PostgresNIO): the carts and the log in one database that several
/// servers share, every one of them delivering every commit.
///
/// A mutation batch runs in one transaction that first locks the `event_seq` row: every
/// writer on every server then commits one after the other, a change is planned from what the
/// last commit left, and the seqs it takes follow commit order without gaps (a refused change
/// takes none: `PostgresBatch`). Delivery is the `PostgresFollower`'s, the same for this
/// server's commits and the others': a caller is answered once the follower has delivered the
/// log up to its own commit.
///
/// Every use of the database ends by a deadline (`PostgresConnections`), so every caller is
/// answered within the 5 s docs/OPERATING.md promises, whatever the database does: a change's callers are told it
/// was made, that nothing was written, or, when the COMMIT went out and no answer came back,
/// that it may or may not have been made.
final class PostgresBackend: CartStoreBackend {
    let location: PostgresLocation
    let client: PostgresClient
    let connections: PostgresConnections
    let follower: PostgresFollower
    /// The carts the batches planned on, kept current by the follower (`CartCache`).
    let cartCache = CartCache()
    let commits: GroupCommit<CartMutation>
    let logger: Logger
    /// The database's identity, read when the store opened it.
    let databaseID: String
    let migrationsApplied: [String]
    var schemaVersion: String { PostgresSchema.migrations.last?.name ?? "" }
    /// The newest failure of the database, naming it (`lastProblem`).
    private let problem = NIOLockedValueBox<StoreProblem?>(nil)
    /// How often the follower reads the log without being told to.
    static let pollInterval: Duration = .seconds(1)

    private init(
        location: PostgresLocation, client: PostgresClient, maximumConnections: Int, executor: EventLoopTaskExecutor, deadline: Duration,
        databaseID: String, migrationsApplied: [String], latestSeq: Int64, logger: Logger, commitLimit: Int
    ) {
        self.location = location
        self.databaseID = databaseID
        self.migrationsApplied = migrationsApplied
        self.client = client
        let connections = PostgresConnections(
            client: client, maximumConnections: maximumConnections, timeout: deadline, executor: executor)
        self.connections = connections
        self.logger = logger
        self.commits = GroupCommit(limit: commitLimit)
        self.follower = PostgresFollower(connections: connections, deliveredThrough: latestSeq, cache: cartCache, logger: logger)
    }

    /// Connects, migrates, and reads where the log stands, on one connection of its own (the
    /// pool is not running yet: see `run`); the follower will deliver from there.
    ///
    /// - Throws: `storeUnavailable` when the database cannot be reached or used,
    ///   `notAFanoutDatabase`, `schemaTooNew`.
    static func open(url: String, deadline: Duration, commitLimit: Int = 4_096) async throws -> PostgresBackend {
        let location = try PostgresLocation(url: url)
        var logger = Logger(label: "fanout.postgres")
        logger.logLevel = .warning
        // PostgresNIO's own warnings include one for every query made before `run()` has
        // started in its task, which is harmless; its errors still show.
        var clientLogger = logger
        clientLogger.logLevel = .error
        // A server that is down or refuses us is an error now, rather than requests that wait
        // for the pool to give up.
        let connection: PostgresConnection
        let tls = try location.connectionTLS()
        do {
            var configuration = PostgresConnection.Configuration(
                host: location.host, port: location.port, username: location.username,
                password: location.password, database: location.database, tls: tls)
            configuration.options.additionalStartupParameters = [PostgresLocation.writerSetting]
            connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: logger)
        } catch {
            throw CartStoreError(.storeUnavailable, "cannot connect to \(location.description): \(Self.describe(error))")
        }
        let latest: Int64
        let databaseID: String
        let migrationsApplied: [String]
        do {
            migrationsApplied = try await PostgresSchema.migrate(connection, logger: logger)
            let row = try await connection.query(
                "SELECT (SELECT latest FROM event_seq), (SELECT id FROM database_identity)", logger: logger
            ).collect().first?.decode((Int64?, String?).self)
            guard let id = row?.1 else {
                throw CartStoreError(.storeUnavailable, "the database has lost its identity (database_identity is empty)")
            }
            (latest, databaseID) = (row?.0 ?? 0, id)
            try await connection.close()
        } catch {
            try? await connection.close()
            throw Self.storage(error, naming: location.description)
        }
        let configuration = try location.clientConfiguration(deadline: deadline)
        let loops = PostgresClient.defaultEventLoopGroup
        let client = PostgresClient(configuration: configuration, eventLoopGroup: loops, backgroundLogger: clientLogger)
        return PostgresBackend(
            location: location, client: client, maximumConnections: configuration.options.maximumConnections,
            executor: EventLoopTaskExecutor(loops.next()), deadline: deadline, databaseID: databaseID, migrationsApplied: migrationsApplied,
            latestSeq: latest, logger: logger,
            commitLimit: commitLimit)
    }

    /// Ends `run` when the store is closed.
    private let closing = AsyncStream<Void>.makeStream()
    private let closed = NIOLockedValueBox(false)

    /// Whether the store has been closed: the services beside it (`PostgresPresence`) end then.
    var isClosed: Bool { closed.withLockedValue { $0 } }

    /// Runs the connection pool and the follower (LISTEN and poll): after `open`, whose
    /// connection is closed by then, nothing reaches the database until they run. They run
    /// until the task is cancelled, the service group that runs them shuts down, or the store
    /// is closed.
    func run() async {
        let client = self.client
        let follower = self.follower
        let executor = connections.executor
        let closed = closing.stream
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                // The follower on the loop its batches are committed from (`PostgresConnections`).
                group.addTask(executorPreference: executor) { await self.listen() }
                group.addTask(executorPreference: executor) { await follower.poll(every: Self.pollInterval) }
                group.addTask { for await _ in closed {} }
                // The first to end (the store closed; the others end only when cancelled).
                _ = await group.next()
                group.cancelAll()
            }
        }
    }

    /// The channels others hear through the store's LISTEN session (`listen(on:_:)`), each
    /// with its listeners.
    private struct ChannelListeners {
        var byChannel: [String: [Int: @Sendable (String?) -> Void]] = [:]
        var nextID = 0
    }
    private let channelListeners = NIOLockedValueBox(ChannelListeners())
    /// Rung when the channels listened to change: the session listens again, on the new set.
    private let channelsChanged = WakeUps()

    /// Hears NOTIFYs on `channel` through the store's one LISTEN session (PostgreSQL wakes
    /// every listening session at each NOTIFY: one session a server, whatever listens): `heard`
    /// gets each payload, and nil each time the session starts listening (again), when a
    /// notification may have been missed. Until the returned closure is called.
    func listen(on channel: String, _ heard: @escaping @Sendable (String?) -> Void) -> @Sendable () -> Void {
        let (id, isNew) = channelListeners.withLockedValue { listeners in
            defer { listeners.nextID += 1 }
            let isNew = listeners.byChannel[channel] == nil
            listeners.byChannel[channel, default: [:]][listeners.nextID] = heard
            return (listeners.nextID, isNew)
        }
        if isNew { channelsChanged.wake() }
        return { [channelListeners] in
            channelListeners.withLockedValue { listeners in
                listeners.byChannel[channel]?[id] = nil
                if listeners.byChannel[channel]?.isEmpty == true { listeners.byChannel[channel] = nil }
            }
        }
    }

    /// LISTENs for the follower, and on every channel someone listens to, on one session
    /// (`PostgresConnections.listen`), until cancelled; again on the new set when it changes.
    private func listen() async {
        let follower = self.follower
        let listeners = channelListeners
        while !Task.isCancelled {
            let channels = [PostgresFollower.channel] + listeners.withLockedValue { $0.byChannel.keys.sorted() }
            try? await channelsChanged.interrupting { [connections, logger] in
                await connections.listen(on: channels, logger: logger) { channel, payload in
                    if channel == PostgresFollower.channel {
                        await follower.heard(payload)
                    } else {
                        for heard in listeners.withLockedValue({ Array(($0.byChannel[channel] ?? [:]).values) }) { heard(payload) }
                    }
                }
            }
        }
    }

    var engineName: String { "postgresql" }

    var waitingChanges: Int { commits.waiting }

    func start(delivering sink: EventSink) {
        follower.attach(sink)
    }

    func deliveredSeq() async -> Int64 {
        await follower.delivered
    }

    /// Ends `run`.
    func close() throws {
        closed.withLockedValue { $0 = true }
        closing.continuation.finish()
    }

    /// Whether a change would be written now: the seq row taken in a transaction of its own,
    /// on a pooled connection and with the lock's wait of a change (a session that holds the
    /// row makes this wait as writes do), on a primary that is not read-only, with every table a
    /// change writes there and writable by this server's role. A table missing (a restore or a
    /// migration under the server) or a privilege revoked fails changes while the seq row alone
    /// would look fine.
    func checkWritable() async throws {
        let logger = self.logger
        let (inRecovery, readOnly, tablesWritable) = try await run {
            try await withConnection { connection in
                try await connection.withTransaction(logger: logger) { connection in
                    try await connection.query(
                        """
                        SELECT pg_is_in_recovery(), current_setting('transaction_read_only'),
                            has_table_privilege('carts', 'INSERT, UPDATE, DELETE')
                            AND has_table_privilege('cart_items', 'INSERT, UPDATE, DELETE')
                            AND has_table_privilege('cart_events', 'INSERT')
                            AND has_table_privilege('idempotency_keys', 'INSERT, UPDATE, DELETE')
                        FROM event_seq FOR UPDATE
                        """,
                        logger: logger
                    ).collect().first?.decode((Bool, String, Bool).self) ?? (true, "on", false)
                }
            }
        }
        guard !inRecovery, readOnly == "off" else {
            throw CartStoreError(
                .storeUnavailable, "the database is read-only (a standby, or transaction_read_only); nothing can be written")
        }
        guard tablesWritable else {
            noteProblem("\(location.description) does not let this server's role write the carts' tables")
            throw CartStoreError(.storeUnavailable, "the database does not let this server write the carts; nothing can be written")
        }
    }

    var batchUnderWayFor: Duration? { commits.batchUnderWayFor }

    var lastProblem: StoreProblem? { problem.withLockedValue { $0 } }

    // MARK: Connections and errors

    /// Runs `body` on a pooled connection, by `PostgresConnections.timeout` from now.
    func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await connections.withConnection(until: .now + connections.timeout, body)
    }

    /// One query on a pooled connection, its rows collected, by `PostgresConnections.timeout` from now.
    func query(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await connections.query(query, until: .now + connections.timeout, logger: logger)
    }

    /// Runs `body`, with PostgreSQL's failures as the store's errors.
    func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw storage(error)
        }
    }

    /// A PostgreSQL failure as the store's error, for callers: it says "the database", never
    /// where it is (anyone may ask `/healthz`). The failure naming the database is kept for the
    /// operator (`lastProblem`, `/stats`) and logged when it is not the one before.
    func storage(_ error: any Error) -> any Error {
        let answer = Self.storage(error, naming: "the database")
        // A refusal of the change itself (no such item, a veto) is no problem of the database.
        guard let answer = answer as? CartStoreError, answer.code == .storeUnavailable || answer.code == .storageFull else {
            return answer
        }
        let detailed = Self.storage(error, naming: location.description, withDetail: true)
        noteProblem((detailed as? CartStoreError)?.message ?? answer.message)
        return answer
    }

    /// Keeps `message` as the newest problem, and logs it unless it is the one before.
    func noteProblem(_ message: String) {
        let changed = problem.withLockedValue { problem in
            defer { problem = StoreProblem(message: message, at: Date().millisecondsSince1970) }
            return problem?.message != message
        }
        if changed { logger.warning("database problem", metadata: ["fanout.store.problem": "\(message)"]) }
    }

    /// A PostgreSQL failure as the store's error, naming the database `place`: a full disk, or
    /// a database that cannot be reached or written. Other errors (the store's refusals, a
    /// validator's veto) pass through. `withDetail` adds what PostgreSQL or the connection pool
    /// said, for the operator (the log, `/stats`): never for callers, whom PostgreSQL's text
    /// would tell table, column and constraint names.
    static func storage(_ error: any Error, naming place: String, withDetail: Bool = false) -> any Error {
        func detail(_ error: any Error) -> String { withDetail ? " (\(describe(error)))" : "" }
        if let timeout = error as? PostgresTimeout {
            // Only a batch knows whether its COMMIT had gone out (`drainCommits`); anything
            // else that ran out of time wrote nothing.
            return CartStoreError(.storeUnavailable, "\(place) gave \(timeout); nothing was written")
        }
        if let transaction = error as? PostgresTransactionError {
            if transaction.beginError == nil, transaction.closureError == nil, let commitError = transaction.commitError,
                !definitelyRolledBack(commitError)
            {
                // COMMIT was sent and no clear answer came back: it may stand. If it does, its
                // event reaches every subscriber once the follower reads it.
                return CartStoreError(
                    .storeUnavailable,
                    "\(place) failed while committing\(detail(commitError)): the change may or may not have been made; read the cart to tell"
                )
            }
            guard let inner = transaction.closureError ?? transaction.commitError ?? transaction.beginError else {
                return CartStoreError(.storeUnavailable, "\(place) cannot be used\(detail(error)); nothing was written")
            }
            return storage(inner, naming: place, withDetail: withDetail)
        }
        if let psql = error as? PSQLError {
            if psql.serverInfo?[.sqlState] == "53100" {
                return CartStoreError(.storageFull, "the database's disk is full; nothing was written (writes resume once space is freed)")
            }
            // PostgreSQL answered no (a missing table, a constraint, a closed session's SQL
            // state), or the session failed.
            let what = psql.serverInfo == nil ? "cannot be used" : "refused the request"
            return CartStoreError(.storeUnavailable, "\(place) \(what)\(detail(error)); nothing was written")
        }
        // The connection pool's own errors (shut down, no connection can be made).
        if String(reflecting: type(of: error)).contains("ConnectionPoolError") {
            return CartStoreError(.storeUnavailable, "\(place) cannot be reached\(withDetail ? " (\(error))" : ""); nothing was written")
        }
        return error
    }

    /// Whether a failed COMMIT surely left nothing behind: PostgreSQL refused it (a transaction
    /// rollback, class 40, or a deferred constraint, class 23). Any other failure, a connection
    /// lost or a session terminated while committing, may have come after the commit record.
    static func definitelyRolledBack(_ error: any Error) -> Bool {
        guard let state = (error as? PSQLError)?.serverInfo?[.sqlState] else { return false }
        return state.hasPrefix("40") || state.hasPrefix("23")
    }

    /// A short description of a PostgresNIO error: the server's message when there is one; a
    /// transaction's failure as the failure inside it (never the statement or its values).
    static func describe(_ error: any Error) -> String {
        if let transaction = error as? PostgresTransactionError,
            let inner = transaction.closureError ?? transaction.commitError ?? transaction.beginError ?? transaction.rollbackError
        {
            return describe(inner)
        }
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] { return message }
            if psql.code == .sslUnsupported { return "the server does not offer TLS, which sslmode requires" }
            // What failed underneath: the connection refused, the name not found, a certificate.
            if let underlying = psql.underlying { return "\(psql.code): \(underlying)" }
            return "\(psql.code)"
        }
        return "\(error)"
    }
}

import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The PostgreSQL engine (PostgresNIO): the carts and the log in one database that several
/// servers share, every one of them delivering every commit.
///
/// A mutation batch runs in one transaction that first locks the `event_seq` row: every
/// writer on every server then commits one after the other, a change is planned from what the
/// last commit left, and the seqs it takes follow commit order without gaps (a refused change
/// rolls back to its savepoint and gives its seq back). Delivery is the `PostgresFollower`'s,
/// the same for this server's commits and the others': a caller is answered once the follower
/// has delivered the log up to its own commit.
///
/// Every use of the database ends by a deadline (`PostgresConnections`), so every caller is
/// answered within the README's 5 s, whatever the database does: a change's callers are told it
/// was made, that nothing was written, or, when the COMMIT went out and no answer came back,
/// that it may or may not have been made.
final class PostgresBackend: CartStoreBackend {
    let location: PostgresLocation
    let client: PostgresClient
    let connections: PostgresConnections
    let follower: PostgresFollower
    let commits: GroupCommit<CartMutation>
    private let logger: Logger
    /// The client's run loop, the LISTEN loop and the poll: cancelled by `close`.
    private let tasks: NIOLockedValueBox<[Task<Void, Never>]>

    /// How often the follower reads the log without being told to.
    static let pollInterval: Duration = .seconds(1)

    private init(location: PostgresLocation, client: PostgresClient, run: Task<Void, Never>, latestSeq: Int64, logger: Logger, commitLimit: Int) {
        self.location = location
        self.client = client
        let connections = PostgresConnections(client: client)
        self.connections = connections
        self.logger = logger
        self.commits = GroupCommit(limit: commitLimit)
        self.follower = PostgresFollower(connections: connections, deliveredThrough: latestSeq, logger: logger)
        self.tasks = NIOLockedValueBox([run])
    }

    /// Connects, migrates, and starts following the log from its newest seq.
    ///
    /// - Throws: `storeUnavailable` when the database cannot be reached or used,
    ///   `notAFanoutDatabase`, `schemaTooNew`.
    static func open(url: String, commitLimit: Int = 4_096) async throws -> PostgresBackend {
        let location = try PostgresLocation(url: url)
        var logger = Logger(label: "fanout.postgres")
        logger.logLevel = .warning
        // PostgresNIO's own warnings include one for every query made before `run()` has
        // started in its task, which is harmless; its errors still show.
        var clientLogger = logger
        clientLogger.logLevel = .error
        // One connection first, so that a server that is down or refuses us is an error now
        // rather than requests that wait for the pool to give up.
        do {
            let probe = try await PostgresConnection.connect(
                configuration: .init(
                    host: location.host, port: location.port, username: location.username,
                    password: location.password, database: location.database, tls: .disable),
                id: 0, logger: logger)
            try await probe.close()
        } catch {
            throw CartStoreError(.storeUnavailable, "cannot connect to \(location.description): \(Self.describe(error))")
        }
        let client = PostgresClient(configuration: location.clientConfiguration, backgroundLogger: clientLogger)
        let run = Task { await client.run() }
        do {
            try await PostgresSchema.migrate(client, logger: logger)
            let latest = try await client.query("SELECT latest FROM event_seq", logger: logger)
                .collect().first?.decode(Int64.self) ?? 0
            return PostgresBackend(location: location, client: client, run: run, latestSeq: latest, logger: logger, commitLimit: commitLimit)
        } catch {
            run.cancel()
            throw Self.storage(error, at: location)
        }
    }

    /// Starts delivering to `store`: the LISTEN doorbell and the poll.
    func start(delivering store: CartStore) async {
        await follower.attach(store)
        let follower = self.follower
        tasks.withLockedValue { tasks in
            tasks.append(Task { await follower.listen() })
            tasks.append(Task { await follower.poll(every: Self.pollInterval) })
        }
    }

    func close() throws {
        for task in tasks.withLockedValue({ $0 }).reversed() { task.cancel() }
    }

    func checkWritable() async throws {
        let (inRecovery, readOnly) = try await run {
            try await self.query("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')", logger: self.logger)
                .first?.decode((Bool, String).self) ?? (true, "on")
        }
        guard !inRecovery, readOnly == "off" else {
            throw CartStoreError(.storeUnavailable, "\(location.description) is read-only (a standby, or transaction_read_only); nothing can be written")
        }
    }

    // MARK: Mutations

    func commit(_ mutation: CartMutation, for store: CartStore) async throws -> CartCommit {
        try await withCheckedThrowingContinuation { caller in
            do {
                if try commits.enqueue(.init(work: mutation, caller: caller)) {
                    Task { await self.drainCommits(for: store) }
                }
            } catch {
                caller.resume(throwing: error)
            }
        }
    }

    /// Commits waiting mutations a batch per transaction until none is left; after each, the
    /// follower delivers the log through the batch, then its callers are answered.
    ///
    /// A batch ends by its oldest mutation's deadline (`PostgresConnections.timeout` after it
    /// was queued); a mutation that waited that long behind earlier batches is answered at once,
    /// never started. So however the database fails, every caller hears within the README's
    /// 5 s (4 s for the database, the rest for this process to answer), and the next batch
    /// starts: nothing waits behind a batch that cannot end.
    private func drainCommits(for store: CartStore) async {
        while let taken = commits.nextBatch() {
            let now = ContinuousClock.now
            var batch: [GroupCommit<CartMutation>.Mutation] = []
            for mutation in taken {
                if mutation.queuedAt + PostgresConnections.timeout > now {
                    batch.append(mutation)
                } else {
                    mutation.caller.resume(throwing: CartStoreError(.storeUnavailable, "\(location.description) gave no answer within \(PostgresConnections.timeout) to the changes before this one; nothing was written"))
                }
            }
            guard let oldest = batch.map(\.queuedAt).min() else { continue }
            let deadline = oldest + PostgresConnections.timeout
            let outcomes: [Result<CartCommit, any Error>]
            let committing = NIOLockedValueBox(false)
            do {
                outcomes = try await commitBatch(batch.map(\.work), for: store, until: deadline, committing: committing)
            } catch {
                let answer = error is PostgresTimeout && committing.withLockedValue({ $0 })
                    ? CartStoreError(.storeUnavailable, "\(location.description) gave no answer to COMMIT within \(PostgresConnections.timeout): the change may or may not have been made; read the cart to tell")
                    : Self.storage(error, at: location)
                for mutation in batch { mutation.caller.resume(throwing: answer) }
                continue
            }
            // Committed: delivered here before the callers hear back, unless the database went
            // away just now or does not answer by the deadline (then the follower delivers it
            // once it is back; the commit stands).
            let follower = self.follower
            _ = try? await PostgresConnections.answer(by: deadline, expired: { PostgresTimeout(leased: true, after: PostgresConnections.timeout) }) {
                await follower.catchUpQuietly()
            }
            for (mutation, outcome) in zip(batch, outcomes) {
                mutation.caller.resume(with: outcome.mapError { Self.storage($0, at: location) })
            }
        }
    }

    /// One transaction for `mutations`, ended by `deadline`. `committing` is set once the
    /// COMMIT is about to go out: from then on, a failure may have come after the commit.
    private func commitBatch(
        _ mutations: [CartMutation], for store: CartStore,
        until deadline: ContinuousClock.Instant, committing: NIOLockedValueBox<Bool>
    ) async throws -> [Result<CartCommit, any Error>] {
        commits.transactions.add(1, ordering: .relaxed)
        let logger = self.logger
        return try await connections.withConnection(until: deadline) { connection in try await connection.withTransaction(logger: logger) { connection in
            let outcomes = try await Self.applyBatch(mutations, for: store, connection, logger)
            committing.withLockedValue { $0 = true }
            return outcomes
        } }
    }

    /// The batch's mutations, inside its transaction: the seq row locked, then each in a savepoint.
    private static func applyBatch(
        _ mutations: [CartMutation], for store: CartStore, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> [Result<CartCommit, any Error>] {
        // Every writer of every server, one after the other from here to COMMIT.
        // Collected, so that a lock timeout is thrown here, not found by the next statement.
        _ = try await connection.query("SELECT latest FROM event_seq FOR UPDATE", logger: logger).collect()
        // A batch of one needs no savepoint: if it fails, the whole transaction rolls back.
        if mutations.count == 1 {
            return [.success(try await apply(mutations[0], for: store, connection, logger))]
        }
        var outcomes: [Result<CartCommit, any Error>] = []
        for mutation in mutations {
            try await connection.query("SAVEPOINT mutation", logger: logger)
            do {
                let commit = try await apply(mutation, for: store, connection, logger)
                try await connection.query("RELEASE SAVEPOINT mutation", logger: logger)
                outcomes.append(.success(commit))
            } catch {
                try await connection.query("ROLLBACK TO SAVEPOINT mutation", logger: logger)
                try await connection.query("RELEASE SAVEPOINT mutation", logger: logger)
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }

    /// One mutation, inside the batch's transaction: the cart read, the plan, its rows written.
    private static func apply(
        _ mutation: CartMutation, for store: CartStore, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> CartCommit {
        let plan = try mutation.plan(
            stored: try await loadCart(mutation.cartID, connection, logger),
            committedAt: Date().millisecondsSince1970, validate: store.validate)
        let event = plan.event
        let cartID = event.cartID
        // One statement, one round trip: the next seq, the log row, the cart's version, its
        // line, and the notification, which listeners get when the transaction commits, never
        // before (a rolled-back savepoint takes it back). The line's foreign key is checked at
        // the end of the statement, when the cart row is there.
        var binds = PostgresBindings()
        try binds.append(cartID)                    // $1
        try binds.append(event.kind.rawValue)       // $2
        try binds.append(plan.encodedChange)        // $3
        try binds.append(event.version)             // $4, the cart's version after it too
        try binds.append(plan.committedAt)          // $5
        let line: String
        switch event.change {
        case .itemAdded(let item, _):
            try binds.append(item.sku)
            try binds.append(Int64(item.quantity))
            try binds.append(Int64(item.unitPriceCents))
            try binds.append(item.name)
            // Upsert that keeps an existing line's position.
            line = """
                INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position)
                SELECT $1, $6, $7, $8, $9, latest FROM next
                ON CONFLICT (cart_id, sku) DO UPDATE SET
                    quantity = excluded.quantity, unit_price_cents = excluded.unit_price_cents, name = excluded.name
                """
        case .quantityChanged(let sku, let quantity):
            try binds.append(sku)
            try binds.append(Int64(quantity))
            line = "UPDATE cart_items SET quantity = $7 WHERE cart_id = $1 AND sku = $6"
        case .itemRemoved(let sku):
            try binds.append(sku)
            line = "DELETE FROM cart_items WHERE cart_id = $1 AND sku = $6"
        case .cartCleared:
            line = "DELETE FROM cart_items WHERE cart_id = $1"
        }
        let statement = """
            WITH next AS (UPDATE event_seq SET latest = latest + 1 RETURNING latest),
            logged AS (
                INSERT INTO cart_events (seq, cart_id, kind, change, cart_version, committed_at)
                SELECT latest, $1, $2, $3, $4, $5 FROM next),
            cart AS (
                INSERT INTO carts (id, version) VALUES ($1, $4)
                ON CONFLICT (id) DO UPDATE SET version = excluded.version),
            line AS (\(line))
            SELECT latest, pg_notify('\(PostgresFollower.channel)', latest::text) FROM next
            """
        guard let (seq, _) = try await connection.query(PostgresQuery(unsafeSQL: statement, binds: binds), logger: logger)
            .collect().first?.decode((Int64, String?).self) else {
            throw CartStoreError(.storeUnavailable, "the event_seq row is missing; nothing was written")
        }
        return plan.committed(seq: seq)
    }

    /// The cart and its lines in one round trip (no row: no cart).
    private static func loadCart(_ cartID: String, _ connection: PostgresConnection, _ logger: Logger) async throws -> Cart? {
        let rows = try await connection.query(
            """
            SELECT c.version, i.sku, i.quantity, i.unit_price_cents, i.name
            FROM carts c LEFT JOIN cart_items i ON i.cart_id = c.id
            WHERE c.id = \(cartID) ORDER BY i.position
            """, logger: logger)
        var version: Int64?
        var items: [CartItem] = []
        for try await (cartVersion, sku, quantity, price, name) in rows.decode((Int64, String?, Int64?, Int64?, String?).self) {
            version = cartVersion
            if let sku, let quantity, let price {
                items.append(CartItem(sku: sku, quantity: Int(quantity), unitPriceCents: Int(price), name: name))
            }
        }
        return version.map { Cart(id: cartID, version: $0, items: items) }
    }

    // MARK: Reads

    func cart(_ cartID: String) async throws -> Cart? {
        try await run { try await self.withConnection { try await Self.loadCart(cartID, $0, self.logger) } }
    }

    /// Read in one repeatable-read transaction: the carts and the seq they reflect agree.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot {
        let ids = cartIDs.map { Array($0) }
        let logger = self.logger
        return try await run {
            try await self.withConnection { connection in try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
                let seq = try await connection.query("SELECT latest FROM event_seq", logger: logger).collect().first?.decode(Int64.self) ?? 0
                var itemsByCart: [String: [CartItem]] = [:]
                let lines = try await connection.query(
                    """
                    SELECT cart_id, sku, quantity, unit_price_cents, name FROM cart_items
                    WHERE \(ids == nil) OR cart_id = ANY(\(ids ?? [])) ORDER BY cart_id, position
                    """, logger: logger)
                for try await (cartID, sku, quantity, price, name) in lines.decode((String, String, Int64, Int64, String?).self) {
                    itemsByCart[cartID, default: []].append(CartItem(sku: sku, quantity: Int(quantity), unitPriceCents: Int(price), name: name))
                }
                var carts: [Cart] = []
                let rows = try await connection.query(
                    "SELECT id, version FROM carts WHERE \(ids == nil) OR id = ANY(\(ids ?? [])) ORDER BY id", logger: logger)
                for try await (id, version) in rows.decode((String, Int64).self) {
                    carts.append(Cart(id: id, version: version, items: itemsByCart[id] ?? []))
                }
                return CartSnapshot(carts: carts, seq: seq)
            } }
        }
    }

    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead {
        let ids = carts.map { Array($0) }
        let logger = self.logger
        return try await run {
            try await self.withConnection { connection in try await connection.withTransaction(logger: logger) { connection in
                try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
                let (latest, oldest) = try await connection.query(
                    "SELECT latest, (SELECT min(seq) FROM cart_events) FROM event_seq", logger: logger
                ).collect().first?.decode((Int64, Int64?).self) ?? (Int64(0), nil)
                guard seq <= latest else {
                    throw CartStoreError(.sinceAhead, "since \(seq) is ahead of the newest event \(latest): this log is not the one you followed")
                }
                let oldestRetained = oldest ?? latest + 1
                guard seq + 1 >= oldestRetained else {
                    return .tooOld(oldestRetainedSeq: oldestRetained, latestSeq: latest)
                }
                var events: [CartEvent] = []
                let rows = try await connection.query(
                    """
                    SELECT seq, cart_id, change, cart_version, committed_at FROM cart_events
                    WHERE seq > \(seq) AND (\(ids == nil) OR cart_id = ANY(\(ids ?? [])))
                    ORDER BY seq LIMIT \(Int64(limit))
                    """, logger: logger)
                for try await (eventSeq, cartID, change, version, committedAt) in rows.decode((Int64, String, String, Int64, Int64).self) {
                    events.append(try .stored(seq: eventSeq, cartID: cartID, change: change, version: version, committedAt: committedAt))
                }
                return .events(events, latestSeq: latest)
            } }
        }
    }

    func latestSeq() async throws -> Int64 {
        try await run {
            try await self.query("SELECT latest FROM event_seq", logger: self.logger).first?.decode(Int64.self) ?? 0
        }
    }

    func oldestRetainedSeq() async throws -> Int64 {
        try await run {
            try await self.query(
                "SELECT coalesce((SELECT min(seq) FROM cart_events), latest + 1) FROM event_seq", logger: self.logger
            ).first?.decode(Int64.self) ?? 1
        }
    }

    func pruneEvents(keepingLast count: Int) async throws -> Int {
        try await run {
            try await self.query(
                """
                WITH pruned AS (DELETE FROM cart_events WHERE seq <= (SELECT latest FROM event_seq) - \(Int64(count)) RETURNING 1)
                SELECT count(*) FROM pruned
                """, logger: self.logger
            ).first.map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }

    func pruneEvents(committedBefore date: Date) async throws -> Int {
        try await run {
            try await self.query(
                """
                WITH pruned AS (DELETE FROM cart_events WHERE committed_at < \(date.millisecondsSince1970) RETURNING 1)
                SELECT count(*) FROM pruned
                """, logger: self.logger
            ).first.map { Int(try $0.decode(Int64.self)) } ?? 0
        }
    }

    // MARK: Connections and errors

    /// Runs `body` on a pooled connection, by `PostgresConnections.timeout` from now.
    private func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await connections.withConnection(until: .now + PostgresConnections.timeout, body)
    }

    /// One query on a pooled connection, its rows collected, by `PostgresConnections.timeout` from now.
    private func query(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await connections.query(query, until: .now + PostgresConnections.timeout, logger: logger)
    }

    /// Runs `body`, with PostgreSQL's failures as the store's errors.
    private func run<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            throw Self.storage(error, at: location)
        }
    }

    /// A PostgreSQL failure as the store's error: a full disk, or a database that cannot be
    /// reached or written. Other errors (the store's refusals, a validator's veto) pass through.
    static func storage(_ error: any Error, at location: PostgresLocation) -> any Error {
        if let timeout = error as? PostgresTimeout {
            // Only a batch knows whether its COMMIT had gone out (`drainCommits`); anything
            // else that ran out of time wrote nothing.
            return CartStoreError(.storeUnavailable, "\(location.description) gave \(timeout); nothing was written")
        }
        if let transaction = error as? PostgresTransactionError {
            if transaction.beginError == nil, transaction.closureError == nil, let commitError = transaction.commitError,
               !definitelyRolledBack(commitError) {
                // COMMIT was sent and no clear answer came back: it may stand. If it does, its
                // event reaches every subscriber once the follower reads it.
                return CartStoreError(.storeUnavailable, "\(location.description) failed while committing (\(describe(commitError))): the change may or may not have been made; read the cart to tell")
            }
            guard let inner = transaction.closureError ?? transaction.commitError ?? transaction.beginError else {
                return CartStoreError(.storeUnavailable, "\(location.description) cannot be used (\(describe(error))); nothing was written")
            }
            return storage(inner, at: location)
        }
        if let psql = error as? PSQLError {
            if psql.serverInfo?[.sqlState] == "53100" {
                return CartStoreError(.storageFull, "the database's disk is full; nothing was written (writes resume once space is freed)")
            }
            return CartStoreError(.storeUnavailable, "\(location.description) cannot be used (\(describe(error))); nothing was written")
        }
        // The connection pool's own errors (shut down, no connection can be made).
        if String(reflecting: type(of: error)).contains("ConnectionPoolError") {
            return CartStoreError(.storeUnavailable, "\(location.description) cannot be reached (\(error)); nothing was written")
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

    /// A short description of a PostgresNIO error: the server's message when there is one.
    static func describe(_ error: any Error) -> String {
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] { return message }
            return "\(psql.code)"
        }
        return "\(error)"
    }
}

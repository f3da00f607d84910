import CartStore
import EventLoopExecutor
import FanoutConcurrency
import NIOConcurrencyHelpers
import PostgresNIO

/// The database's pooled connections, every use of one bounded in time: the wait for a
/// connection, the statements, the COMMIT and the rows together end by a deadline, whatever
/// the database does meanwhile (gone, frozen, cut off by the network, a session ended under a
/// statement).
///
/// PostgresNIO bounds none of that by itself: a query on a connection waits for the server's
/// answer, and cancelling its task does not end that wait. So at the deadline the caller is
/// answered with `PostgresTimeout`, and the connection in use is closed, which fails whatever
/// statement waits on it (PostgreSQL then rolls back what that session had not committed); the
/// task that ran the work is left to end on its own.
struct PostgresConnections: Sendable {
    let client: PostgresClient
    /// The most connections the pool holds: the most dead sessions a use may pass over.
    let maximumConnections: Int

    /// How long one use of the database may take, from asking for a connection to the last
    /// row (`PostgresCartStore.defaultDeadline` unless its opener chose another).
    let timeout: Duration

    /// The event loop the engine's own work runs on: its batches (`PostgresBackend.commit`),
    /// the follower, and the deadline of every use. Their statements run on the loop of the
    /// connection lent (`withConnection`), and await nothing else. On Swift's global executor
    /// instead, each statement's answer woke a thread of its pool, and its next statement woke
    /// the loop again: a batch's five round trips cost ten thread switches.
    let executor: EventLoopTaskExecutor

    /// Runs `body` on a pooled connection and returns what it returns, or throws
    /// `PostgresTimeout` at `deadline` (then the connection, if one was lent, is closed).
    ///
    /// A session the database ended is closed before it goes back to the pool, as is one found
    /// closed when lent: a statement sent on a closed connection may never be answered. Such a
    /// session met before anything of `body` can have taken effect (found closed when lent, or
    /// lost at its transaction's BEGIN) is passed over for another, as long as the pool may hold
    /// another one and the deadline allows: after a restart every idle pooled session is dead,
    /// and none of them should cost a caller a refusal.
    func withConnection<T: Sendable>(
        until deadline: ContinuousClock.Instant,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let lease = NIOLockedValueBox(Lease())
        let client = self.client
        let attempts = maximumConnections
        let timeout = self.timeout
        return try await Deadline.race(
            until: deadline,
            on: executor,
            expired: {
                let (connection, leased) = lease.withLockedValue { lease in
                    lease.expired = true
                    return (lease.connection, lease.leased)
                }
                if let connection {
                    let _: EventLoopFuture<Void> = connection.close()
                }
                return PostgresTimeout(leased: leased, after: timeout)
            }
        ) {
            var attempt = 1
            while true {
                do {
                    return try await client.withConnection { connection in
                        // Once the caller has been answered, nothing starts.
                        try lease.withLockedValue { lease in
                            guard !lease.expired else { throw PostgresTimeout(leased: false, after: timeout) }
                            lease.connection = connection
                            lease.leased = true
                        }
                        // Given back to the pool from here on: not ours to close at the deadline.
                        defer { lease.withLockedValue { $0.connection = nil } }
                        guard !connection.isClosed else { throw SessionEndedUnused() }
                        do {
                            return try await withTaskExecutorPreference(EventLoopTaskExecutor(connection.eventLoop)) {
                                try await body(connection)
                            }
                        } catch {
                            if Self.endsSession(error) || Self.spoilsPreparedStatements(error) { try? await connection.close() }
                            throw error
                        }
                    }
                } catch  where attempt < attempts && Self.endedUnused(error) {
                    attempt += 1
                } catch is SessionEndedUnused {
                    throw CartStoreError(.storeUnavailable, "the database had closed every connection lent; nothing was written")
                }
            }
        }
    }

    /// The session lent was found closed before `body` ran.
    private struct SessionEndedUnused: Error {}

    /// Whether `error` is a session that ended before anything sent on it could take effect:
    /// found closed when lent, or lost at BEGIN (a transaction that never began commits
    /// nothing). Anything later may have done its work, and is the caller's to answer.
    private static func endedUnused(_ error: any Error) -> Bool {
        if error is SessionEndedUnused { return true }
        guard let transaction = error as? PostgresTransactionError, let begin = transaction.beginError else { return false }
        return endsSession(begin)
    }

    private struct Lease {
        var connection: PostgresConnection?
        var leased = false
        var expired = false
    }

    /// Whether `error` means the connection it came from is finished: lost, or ended by the
    /// database (a FATAL error: terminated, shut down, a session timeout).
    private static func endsSession(_ error: any Error) -> Bool {
        if let transaction = error as? PostgresTransactionError {
            return [transaction.beginError, transaction.closureError, transaction.commitError, transaction.rollbackError]
                .contains { $0.map(endsSession) ?? false }
        }
        guard let psql = error as? PSQLError else { return false }
        if let severity = psql.serverInfo?[.severity] { return severity == "FATAL" || severity == "PANIC" }
        return [.serverClosedConnection, .clientClosedConnection, .connectionError, .uncleanShutdown].contains(psql.code)
    }

    /// Whether `error` may be a statement's preparation that failed for the schema as it was
    /// then (SQLSTATE class 42: a table, column or function missing, a privilege not granted;
    /// 0A, 3F, 26): PostgresNIO remembers a failed preparation for the life of the session and
    /// answers every later use of that statement on it with the same error, even once the
    /// table is back (a restore or a migration run under the server). The session is closed,
    /// and its successor prepares anew.
    static func spoilsPreparedStatements(_ error: any Error) -> Bool {
        if let transaction = error as? PostgresTransactionError {
            return [transaction.beginError, transaction.closureError, transaction.commitError]
                .contains { $0.map(spoilsPreparedStatements) ?? false }
        }
        guard let state = (error as? PSQLError)?.serverInfo?[.sqlState] else { return false }
        return ["42", "0A", "3F", "26"].contains { state.hasPrefix($0) }
    }

    /// One prepared statement on a pooled connection, its rows collected, by `timeout` from now.
    func execute<Statement: PostgresPreparedStatement & Sendable>(
        _ statement: Statement, logger: Logger
    ) async throws -> [Statement.Row] where Statement.Row: Sendable {
        try await withConnection(until: .now + timeout) { connection in
            var rows: [Statement.Row] = []
            for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
            return rows
        }
    }

    /// One query, its rows collected, by `deadline`.
    func query(_ query: PostgresQuery, until deadline: ContinuousClock.Instant, logger: Logger) async throws -> [PostgresRow] {
        try await withConnection(until: deadline) { try await $0.query(query, logger: logger).collect() }
    }
}

/// The database did not finish within its deadline (`PostgresConnections.timeout`): no connection was lent
/// (`leased` false: the database is down or every connection busy), or the one lent gave no
/// answer in time (frozen, cut off, or a lock held elsewhere).
struct PostgresTimeout: Error, CustomStringConvertible {
    let leased: Bool
    let after: Duration

    var description: String {
        leased ? "no answer within \(after)" : "no connection within \(after)"
    }
}

extension PostgresConnections {
    /// LISTENs on `channels`, all on one pooled connection, until cancelled: calls `heard`
    /// with a channel and `nil` once it listens (after each reconnection too: a notification may
    /// have been missed meanwhile), then with each notification's payload, in order per
    /// channel. A lost connection is logged and made again after `reconnectDelay`. A
    /// notification is a doorbell: what it announces must be readable otherwise too (a poll),
    /// as a notification sent while reconnecting is lost.
    ///
    /// One session for every channel: PostgreSQL (15) wakes every session listening in the
    /// database at each NOTIFY, whatever its channel, so a session per channel would be woken
    /// by every batch.
    ///
    /// However it ends, the connection is closed rather than given back to the pool: it may still
    /// be LISTENing, or be the one the database just ended (the pool would lend it to a commit
    /// before it noticed, and that commit failed, or waited without end).
    func listen(
        on channels: [String], logger: Logger, reconnectDelay: Duration = .seconds(1),
        heard: @escaping @Sendable (_ channel: String, _ payload: String?) async -> Void
    ) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    do {
                        // The first channel's listening to end (the connection lost) ends all.
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            for channel in channels {
                                group.addTask {
                                    try await connection.listen(on: channel) { notifications in
                                        await heard(channel, nil)
                                        for try await notification in notifications {
                                            await heard(channel, notification.payload)
                                        }
                                    }
                                }
                            }
                            try await group.next()
                            group.cancelAll()
                        }
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    try? await connection.close()
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("LISTEN \(channels.joined(separator: ", ")) lost (\(PostgresBackend.describe(error))); reconnecting")
            }
            try? await Task.sleep(for: reconnectDelay)
        }
    }
}

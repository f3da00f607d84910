import CartStore
import Foundation
import PostgresNIO

/// Where a PostgreSQL database is: `postgres://user[:password]@host[:port]/database` (or
/// `postgresql://`), the form `DATABASE_URL` takes. TLS is not used: the server is expected on
/// the same host or a private network.
struct PostgresLocation: Sendable, Equatable {
    var host: String
    var port: Int
    var username: String
    var password: String?
    var database: String

    init(url string: String) throws {
        guard CartStore.isPostgresURL(string), let url = URLComponents(string: string),
            let host = url.host, !host.isEmpty
        else {
            throw CartStoreError(
                .storeUnavailable, "not a PostgreSQL URL (postgres://user@host:port/database): \(CartStore.printableLocation(string))")
        }
        let database = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
        guard !database.isEmpty, !database.contains("/") else {
            throw CartStoreError(
                .storeUnavailable,
                "the PostgreSQL URL names no database (postgres://user@host:port/database): \(CartStore.printableLocation(string))")
        }
        self.host = host
        port = url.port ?? 5432
        username = url.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
        password = url.password.flatMap { $0.removingPercentEncoding }
        self.database = database.removingPercentEncoding ?? database
    }

    /// The pool's configuration, for uses of the database that end by `deadline`.
    func clientConfiguration(deadline: Duration) -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: .disable)
        configuration.options.additionalStartupParameters = Self.sessionSettings(deadline: deadline)
        // A new connection to a database that accepts but does not answer (frozen) is given up
        // like any other use of it (`PostgresConnections`); the pool then tries again.
        configuration.options.connectTimeout = deadline
        // No keep-alives: PostgresNIO's pool gives each connection it takes back a keep-alive
        // timer (a few tasks and a dispatch timer on Swift's global executor, cancelled when it
        // is lent again: a batch's lease cost more thread switches than its statements). A
        // session that died while idle is found when lent (`PostgresConnections.withConnection`
        // passes over it), so keep-alives buy nothing here. (Its idle timer stays: keeping
        // connections open with `minimumConnections` would avoid it, but PostgresNIO 1.33's
        // pool traps, a precondition, when a connection is asked for while it holds fewer
        // than that minimum, as after the database ended its sessions: seen in the tests.)
        configuration.options.keepAliveBehavior = nil
        return configuration
    }

    /// Every session's settings. Commits on every server wait for one row lock (`event_seq`):
    /// a writer waits for it `lock_timeout` at most, then its callers get 503
    /// `store_unavailable` ("nothing was written") with the session intact, before the
    /// deadline of `PostgresConnections` would close it; and a session of ours that stops in
    /// the middle of a transaction (its server frozen, or cut off) gives the lock up after
    /// `idle_in_transaction_session_timeout`, so that the other servers write again. Both
    /// follow the deadline (3 s and 10 s for the default 4 s): far above any wait of a healthy
    /// server, even a loaded one. Migrations run before any deadline applies.
    static func sessionSettings(deadline: Duration) -> [(String, String)] {
        let milliseconds = Int(deadline / .milliseconds(1))
        return [
            ("application_name", "fanout"),
            // The carts' tables refuse changes from any other session (migration 0006).
            writerSetting,
            ("lock_timeout", "\(max(milliseconds * 3 / 4, 1))ms"),
            ("idle_in_transaction_session_timeout", "\(max(milliseconds * 5 / 2, 1_000))ms"),
        ]
    }

    /// What a session of fanout's says, to change the carts' tables (migration 0006 refuses
    /// every other session's changes to them).
    static let writerSetting = ("fanout.writer", "on")

    /// The URL without its password, for messages.
    var description: String { "postgres://\(username)@\(host):\(port)/\(database)" }
}

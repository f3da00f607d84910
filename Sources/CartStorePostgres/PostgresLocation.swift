import CartStore
import Foundation
import NIOSSL
import PostgresNIO

/// Where a PostgreSQL database is, and how to reach it:
/// `postgres://user[:password]@host[:port]/database[?sslmode=…&sslrootcert=…]` (or
/// `postgresql://`), the form `DATABASE_URL` takes, with libpq's meaning of `sslmode`:
///
/// - `disable`: no TLS.
/// - `prefer` (the default, as libpq's): TLS when the server offers it, its certificate not
///   checked; without, in the clear.
/// - `require`: TLS or no connection; the certificate not checked (it encrypts, it does not tell
///   who answers).
/// - `verify-ca`: TLS, with a certificate signed by `sslrootcert` (a PEM file), or by a CA the
///   system trusts.
/// - `verify-full`: as `verify-ca`, and the certificate names the URL's host.
///
/// Anything else in the query (`allow`, client certificates, other parameters) is refused with
/// the reason, never ignored: a URL that says `sslmode=require` must not connect in the clear.
struct PostgresLocation: Sendable, Equatable {
    /// How the connections use TLS (`sslmode`).
    enum TLSMode: String, Sendable, Equatable, CaseIterable {
        case disable, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    var host: String
    var port: Int
    var username: String
    var password: String?
    var database: String
    var tlsMode: TLSMode = .prefer
    /// `sslrootcert`: the CA certificates (PEM) a `verify-` mode trusts, instead of the system's.
    var rootCertificates: String?

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
        for item in url.queryItems ?? [] {
            switch item.name {
            case "sslmode":
                guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                    throw CartStoreError(
                        .storeUnavailable,
                        "sslmode=\(item.value ?? "") is not supported: use \(TLSMode.allCases.map(\.rawValue).joined(separator: ", ")) (the PostgreSQL URL \(CartStore.printableLocation(string)))"
                    )
                }
                tlsMode = mode
            case "sslrootcert":
                guard let path = item.value, !path.isEmpty else {
                    throw CartStoreError(
                        .storeUnavailable, "sslrootcert names no file (the PostgreSQL URL \(CartStore.printableLocation(string)))")
                }
                rootCertificates = path
            default:
                throw CartStoreError(
                    .storeUnavailable,
                    "the PostgreSQL URL's parameter \(item.name) is not supported (fanout reads sslmode and sslrootcert): \(CartStore.printableLocation(string))"
                )
            }
        }
        if rootCertificates != nil, ![.verifyCA, .verifyFull].contains(tlsMode) {
            throw CartStoreError(
                .storeUnavailable,
                "sslrootcert is used by sslmode=verify-ca or verify-full only (the PostgreSQL URL \(CartStore.printableLocation(string)))")
        }
    }

    /// The TLS of a connection, as `tlsMode` says: nil for none.
    ///
    /// - Throws: `storeUnavailable` when `sslrootcert` cannot be read as PEM certificates.
    func tlsConfiguration() throws -> TLSConfiguration? {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch tlsMode {
        case .disable:
            return nil
        case .prefer, .require:
            configuration.certificateVerification = .none
        case .verifyCA, .verifyFull:
            configuration.certificateVerification = tlsMode == .verifyFull ? .fullVerification : .noHostnameVerification
            if let rootCertificates {
                do {
                    configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(rootCertificates))
                } catch {
                    throw CartStoreError(.storeUnavailable, "sslrootcert \(rootCertificates) cannot be read as PEM certificates: \(error)")
                }
            }
        }
        return configuration
    }

    /// The pool's TLS.
    func clientTLS() throws -> PostgresClient.Configuration.TLS {
        guard let configuration = try tlsConfiguration() else { return .disable }
        return tlsMode == .prefer ? .prefer(configuration) : .require(configuration)
    }

    /// The TLS of a connection of its own (the migrations').
    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        guard let configuration = try tlsConfiguration() else { return .disable }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw CartStoreError(.storeUnavailable, "TLS for the database cannot be set up: \(error)")
        }
        return tlsMode == .prefer ? .prefer(context) : .require(context)
    }

    /// The pool's configuration, for uses of the database that end by `deadline`.
    func clientConfiguration(deadline: Duration) throws -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: try clientTLS())
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

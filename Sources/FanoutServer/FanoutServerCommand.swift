import ArgumentParser
import CartStore
import CartStorePostgres
import CommandLineRepair
import FanoutProtocol
import Foundation
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// `fanout-server`: parses the command line, opens the store, runs the server.
@main
struct FanoutServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout-server",
        abstract: "Serve carts over HTTP and fan every committed change out to subscribers (WebSocket, Server-Sent Events, long-poll).",
        discussion: """
            The first line on stdout is always `listening on http://HOST:PORT` (https:// with --tls-cert).
            Example: fanout-server --port 8080 --db ./fanout.sqlite
            Several servers share one PostgreSQL database: every one delivers every commit.
            Example: fanout-server --port 8080 --db postgres://fanout@127.0.0.1:5432/fanout
            Each user sees only their own carts with signed tokens (see `fanout-server token`).
            Example: fanout-server --token OPERATOR-KEY --jwt-secret SECRET
            """,
        version: FanoutVersion.current,
        subcommands: [TokenCommand.self, BackupCommand.self])

    /// ArgumentParser's `main`, with a mistyped command or option said as a person would
    /// (`ArgumentRepair`).
    static func main() async {
        await ArgumentRepair.run(ArgumentRepair.parse(Array(CommandLine.arguments.dropFirst()), as: Self.self), of: Self.self)
    }

    /// The defaults, said once: the flags' defaults are the configuration's.
    private static let defaults = ServerConfiguration()

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port: Int = defaults.port

    @Option(help: "Address to bind. The default accepts local connections only.")
    var host: String = defaults.host

    /// `--db` and `--database-url`: one definition for the server and `backup` (an option the
    /// parent declares apart from its subcommand's goes to the parent alone).
    struct DatabaseOptions: ParsableArguments {
        @Option(
            name: .customLong("db"),
            help: ArgumentHelp(
                "SQLite database file (created if missing), or a PostgreSQL database as postgres://user[:password]@host[:port]/database (or set DATABASE_URL).",
                valueName: "path-or-url"))
        var database: String?

        @Option(name: .customLong("database-url"), help: "The same as --db with a postgres:// URL.")
        var databaseURL: String?

        /// The database named, if any: `--database-url`, else `--db`.
        var named: String? { databaseURL ?? database }
    }

    @OptionGroup var databaseOptions: DatabaseOptions

    @Option(help: "Seconds between heartbeats, both ways (fractions allowed).")
    var heartbeatInterval: Double = defaults.heartbeatInterval.seconds

    @Option(name: .customLong("lease-ttl"), help: "Seconds without a client message before a subscriber is dropped.")
    var leaseTTL: Double = defaults.leaseTTL.seconds

    @Option(
        name: [.customLong("ring-size"), .customLong("outbox-limit")],
        help: ArgumentHelp(
            "Live events held for all subscribers (the ring): a subscriber further behind is dropped as too slow and resumes from the log. --outbox-limit is its older name.",
            valueName: "events"))
    var ringSize: Int = defaults.ringSize

    @Option(help: "Most concurrent subscribers (WebSocket and event stream), and most waiting long-polls.")
    var maxSubscribers: Int = defaults.maxSubscribers

    @Option(
        help:
            "The operator's bearer token: every route but the page, /healthz and /openapi.json then needs a credential, and this one opens them all, /stats and /metrics included (or set FANOUT_TOKEN)."
    )
    var token: String?

    @OptionGroup var signing: TokenCommand.Signing

    @Option(
        name: .customLong("jwt-key"),
        help: ArgumentHelp(
            "Accept end users' RS256, ES256 or EdDSA tokens verified with the PEM public key, or the JWKS (keys with kid), in this file.",
            valueName: "file"))
    var jwtKey: String?

    @Option(name: .customLong("jwt-audience"), help: "Accept only signed tokens whose aud names this audience.")
    var jwtAudience: String?

    @Option(name: .customLong("allow-origin"), help: "A browser origin allowed to connect, e.g. http://localhost:3000 (repeatable).")
    var allowedOrigins: [String] = []

    @Option(
        name: .customLong("allow-host"),
        help: "A Host name to answer to besides localhost and loopback addresses, e.g. carts.internal (repeatable).")
    var allowedHosts: [String] = []

    @Option(
        name: .customLong("idempotency-keys-ttl"),
        help: ArgumentHelp(
            "Seconds a change's Idempotency-Key is kept to answer a repeat (fractions allowed); pruned within a minute after.",
            valueName: "seconds"))
    var idempotencyKeysTTL: Double = defaults.idempotencyKeysTTL.seconds

    @Option(
        name: .customLong("idempotency-keys-max"),
        help: ArgumentHelp("Most Idempotency-Keys kept; past it the oldest are forgotten first.", valueName: "keys"))
    var idempotencyKeysMax: Int = defaults.idempotencyKeysMax

    @Option(
        name: .customLong("presence-max-members"),
        help: ArgumentHelp("Most members of one cart's presence; a subscription past it is refused presence_full.", valueName: "members"))
    var presenceMaxMembers: Int = defaults.presenceMaxMembers

    @Option(
        name: .customLong("presence-max-members-per-user"),
        help: ArgumentHelp(
            "Most members one user (a signed token's sub) may have on one cart; past it a subscription is refused presence_full.",
            valueName: "members"))
    var presenceMaxMembersPerUser: Int = defaults.presenceMaxMembersPerUser

    @Option(
        help: ArgumentHelp(
            "Event-loop threads (default: one per core): they serve every connection, the fan-out and the PostgreSQL engine. On a machine shared with other servers or the database, give each server its share of the cores.",
            valueName: "count"))
    var threads: Int?

    @Option(
        name: .customLong("tls-cert"),
        help: ArgumentHelp(
            "Serve https:// and wss:// with this PEM certificate (its chain after it, if any); needs --tls-key.", valueName: "file"))
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The PEM private key of --tls-cert.", valueName: "file"))
    var tlsKey: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical (or set LOG_LEVEL).")
    var logLevel: String?

    @Option(help: "text (one line a message, key=value) or json (one JSON object a line, for log shippers).")
    var logFormat: ServerLogHandler.Format = .text

    func validate() throws {
        guard (0...65_535).contains(port) else { throw ValidationError("--port must be 0…65535") }
        guard heartbeatInterval.isFinite, heartbeatInterval > 0 else { throw ValidationError("--heartbeat-interval must be > 0") }
        guard leaseTTL.isFinite, leaseTTL > heartbeatInterval else {
            throw ValidationError("--lease-ttl must be longer than --heartbeat-interval")
        }
        guard ringSize >= 1 else { throw ValidationError("--ring-size must be ≥ 1") }
        guard maxSubscribers >= 1 else { throw ValidationError("--max-subscribers must be ≥ 1") }
        guard idempotencyKeysTTL.isFinite, idempotencyKeysTTL > 0 else { throw ValidationError("--idempotency-keys-ttl must be > 0") }
        guard idempotencyKeysMax >= 1 else { throw ValidationError("--idempotency-keys-max must be ≥ 1") }
        guard presenceMaxMembers >= 1 else { throw ValidationError("--presence-max-members must be ≥ 1") }
        guard presenceMaxMembersPerUser >= 1 else { throw ValidationError("--presence-max-members-per-user must be ≥ 1") }
        if (tlsCertificate == nil) != (tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together: the certificate and its private key")
        }
        if let threads, !(1...Self.maxThreads).contains(threads) { throw ValidationError("--threads must be 1…\(Self.maxThreads)") }
        if let level = logLevel ?? ProcessInfo.processInfo.environment["LOG_LEVEL"], Logger.Level(rawValue: level) == nil {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    /// The most event-loop threads SwiftNIO's shared group takes.
    static let maxThreads = 1_024

    func run() async throws {
        // Before anything uses the shared event-loop group, which is made once, with this many
        // loops (SwiftNIO also reads NIO_SINGLETON_GROUP_LOOP_COUNT when the flag is absent).
        if let threads { NIOSingletons.groupLoopCountSuggestion = threads }
        var configuration = try configuration(environment: ProcessInfo.processInfo.environment)

        let format = logFormat
        LoggingSystem.bootstrap { label in ServerLogHandler(label: label, format: format) }
        var logger = Logger(label: "fanout")
        logger.logLevel = configuration.logLevel
        // In the log, in its format; here, not in `validate()`, which runs for `token` too.
        if let secret = configuration.jwtSecret, let weakness = TokenKeys.weakness(of: secret) { logger.warning("\(weakness)") }
        if let tls = configuration.tls, let warning = ServerTLS.expiryWarning(tls) { logger.warning("\(warning)") }
        // Connections beyond the descriptors left wait in the listen backlog, instead of
        // failing every accept (which spun a core) while idle ones time out.
        let openFiles = OpenFilesLimit.raise(logger: logger)
        guard openFiles >= OpenFilesLimit.lowestUsable else {
            throw StartupFailure(
                description:
                    "the open files limit (\(openFiles)) leaves no room for connections: fanout-server needs at least \(OpenFilesLimit.lowestUsable) (\(OpenFilesLimit.reserve) for itself, \(OpenFilesLimit.fewestConnections) connections); raise it (ulimit -n)"
            )
        }
        let connections = openFiles - OpenFilesLimit.reserve
        configuration.maxConnections = connections
        // A subscriber past the descriptors would wait in the backlog: it is refused as
        // `server_full` instead, and the operator told at start.
        let subscriberRoom = OpenFilesLimit.subscriberRoom(connections: connections)
        if configuration.maxSubscribers > subscriberRoom {
            logger.warning(
                "the open files limit (\(openFiles)) leaves room for \(subscriberRoom) subscribers, fewer than --max-subscribers \(configuration.maxSubscribers): past \(subscriberRoom) a subscriber is refused with server_full; raise the hard limit (ulimit -Hn) to serve more"
            )
            configuration.maxSubscribers = subscriberRoom
        }

        let host = configuration.host
        let port = configuration.port
        let scheme = configuration.scheme
        // A database file this start creates is removed again if the server never listens (its
        // port taken, say): a failed start leaves nothing behind.
        let newFile = CartStore.isPostgresURL(configuration.database) ? nil : Self.newFile(configuration.database)
        let listening = Synchronization.Atomic<Bool>(false)
        let server: FanoutServerApp
        let started = NIOLockedValueBox(Self.startLine(configuration, openFiles: openFiles))
        do {
            let logger = logger
            server = try await Self.build(configuration: configuration, logger: logger) { port in
                listening.store(true, ordering: .relaxed)
                logger.info("fanout-server started", metadata: started.withLockedValue { $0 }.merging(["fanout.port": "\(port)"]) { $1 })
                // Unbuffered: scripts and tests wait for this line.
                FileHandle.standardOutput.write(Data("listening on \(scheme)://\(host):\(port)\n".utf8))
            }
        } catch {
            if let newFile { Self.remove(newFile) }
            throw error
        }
        // The schema, known once the store is open: its newest migration, and those this start applied.
        started.withLockedValue {
            $0["fanout.schema"] = "\(server.store.schemaVersion)"
            $0["fanout.migrated"] =
                "\(server.store.migrationsApplied.isEmpty ? "none" : server.store.migrationsApplied.joined(separator: ","))"
        }
        do {
            try await server.run()
        } catch {
            guard !listening.load(ordering: .relaxed) else { throw error }
            try? server.store.close()
            if let newFile { Self.remove(newFile) }
            if Self.isAddressInUse(error) {
                throw StartupFailure(
                    description:
                        "port \(port) on \(host) is in use by another program: stop it, or choose another port with --port (0 picks a free one)"
                )
            }
            throw StartupFailure(description: "cannot listen on \(host):\(port): \(error)")
        }
        try server.store.close()
    }

    /// What the start line says: the version, the engine and the database (without its
    /// password), how clients are let in, and the limits in force.
    private static func startLine(_ configuration: ServerConfiguration, openFiles: Int) -> Logger.Metadata {
        let engine = CartStore.isPostgresURL(configuration.database) ? "postgresql" : "sqlite"
        var access: [String] = []
        if configuration.token != nil { access.append("operator token") }
        if configuration.jwtSecret != nil { access.append("signed tokens (HS256 secret)") }
        if configuration.jwtKey != nil { access.append("signed tokens (public keys)") }
        if access.isEmpty { access.append("open: no credential asked") }
        return [
            "fanout.version": "\(FanoutVersion.current)",
            "fanout.engine": "\(engine)",
            "fanout.database": "\(CartStore.printableLocation(configuration.database))",
            "fanout.host": "\(configuration.host)",
            "fanout.tls": "\(configuration.tls == nil ? "off" : "on")",
            "fanout.access": "\(access.joined(separator: " + "))",
            "fanout.max_subscribers": "\(configuration.maxSubscribers)",
            "fanout.open_files": "\(openFiles)",
            "fanout.threads": "\(NIOSingletons.groupLoopCountSuggestion)",
            "fanout.lease_ttl_s": "\(configuration.leaseTTL.seconds)",
            "fanout.heartbeat_s": "\(configuration.heartbeatInterval.seconds)",
        ]
    }

    /// `path`, if no file is there yet (a new SQLite database would be made there).
    private static func newFile(_ path: String) -> String? {
        FileManager.default.fileExists(atPath: path) ? nil : path
    }

    /// Removes a SQLite database this start made, with its journal and lock files.
    private static func remove(_ path: String) {
        for suffix in ["", "-wal", "-shm", "-journal", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    /// Whether `error` (or the error it wraps) is a bind refused for an address in use.
    private static func isAddressInUse(_ error: any Error) -> Bool {
        if let io = error as? IOError { return io.errnoCode == EADDRINUSE }
        return "\(error)".contains("Address already in use")
    }

    /// The server's configuration from the flags, and from `environment` where a flag is absent
    /// (`DATABASE_URL`, `FANOUT_TOKEN`, the signing secret's variable, `LOG_LEVEL`).
    ///
    /// - Throws: `StartupFailure` when the `--jwt-key` file cannot be read.
    func configuration(environment: [String: String]) throws -> ServerConfiguration {
        var configuration = ServerConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.database =
            databaseOptions.named
            ?? environment["DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? configuration.database
        if let scheme = configuration.database.range(of: "://").map({ configuration.database[..<$0.lowerBound] }),
            !CartStore.isPostgresURL(configuration.database)
        {
            // Not a file's path either: "mysql://…" would have made a folder named "mysql:".
            throw StartupFailure(
                description:
                    "--db takes a SQLite database file's path or a PostgreSQL URL (postgres://user@host:port/database); a \(scheme.prefix(20)):// URL is not supported"
            )
        }
        configuration.heartbeatInterval = .seconds(heartbeatInterval)
        configuration.leaseTTL = .seconds(leaseTTL)
        configuration.ringSize = ringSize
        configuration.maxSubscribers = maxSubscribers
        configuration.idempotencyKeysTTL = .seconds(idempotencyKeysTTL)
        configuration.idempotencyKeysMax = idempotencyKeysMax
        configuration.presenceMaxMembers = presenceMaxMembers
        configuration.presenceMaxMembersPerUser = presenceMaxMembersPerUser
        configuration.token = token ?? environment["FANOUT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        configuration.jwtSecret = signing.secret(environment: environment)
        configuration.jwtAudience = jwtAudience
        if let jwtKey {
            do {
                configuration.jwtKey = try String(contentsOfFile: jwtKey, encoding: .utf8)
            } catch {
                throw StartupFailure(description: "cannot read --jwt-key \(jwtKey): \(error.localizedDescription)")
            }
        }
        if let tlsCertificate, let tlsKey {
            configuration.tls = try ServerTLS.configuration(certificate: tlsCertificate, key: tlsKey)
        }
        configuration.allowedOrigins = Set(allowedOrigins)
        configuration.allowedHosts = Set(allowedHosts)
        configuration.logLevel = (logLevel ?? environment["LOG_LEVEL"]).flatMap(Logger.Level.init(rawValue:)) ?? .info
        return configuration
    }

    /// Opens the configuration's database and builds the server on it, not yet running.
    ///
    /// - Throws: `StartupFailure` saying what cannot be used (the database, a signing key).
    static func build(
        configuration: ServerConfiguration, logger: Logger, eventLoopGroup: EventLoopGroupProvider = .singleton,
        onServerRunning: @escaping @Sendable (Int) async -> Void
    ) async throws -> FanoutServerApp {
        let store: CartStore
        var storeService: PostgresCartStore?
        var presenceSharing: PostgresPresenceSharing?
        let location = configuration.database
        do {
            if CartStore.isPostgresURL(location) {
                // Its pool and follower run in the server's service group (`buildApplication`).
                let postgres = try await PostgresCartStore(url: location)
                store = postgres.store
                storeService = postgres
                // Every server of the database answers for every server's presence.
                presenceSharing = PostgresPresenceSharing(store: postgres)
            } else {
                store = try CartStore(path: location)
            }
        } catch let error as CartStoreError {
            throw StartupFailure(description: "cannot use \(CartStore.printableLocation(location)): \(error)")
        } catch {
            throw StartupFailure(description: "cannot open database \(CartStore.printableLocation(location)): \(error)")
        }
        do {
            return try await buildApplication(
                configuration: configuration, store: store, storeService: storeService, presenceSharing: presenceSharing,
                logger: logger, eventLoopGroup: eventLoopGroup, onServerRunning: onServerRunning)
        } catch let error as TokenKeys.Unusable {
            try? store.close()
            throw StartupFailure(description: error.description)
        }
    }
}

/// A reason the server cannot start; printed as "Error: …" with exit status 1.
struct StartupFailure: Error, CustomStringConvertible {
    let description: String
}

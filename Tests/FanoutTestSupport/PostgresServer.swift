import Foundation
import NIOConcurrencyHelpers
import Testing

/// A PostgreSQL server for the tests: a throwaway cluster of their own (`initdb` in a temporary
/// folder, on a free port of 127.0.0.1, gone after `stop()`), or the server FANOUT_POSTGRES_URL
/// names. Starting a cluster takes seconds, so tests share one and each makes a database of its
/// own with `makeDatabase(named:)`.
///
/// Needs PostgreSQL (`apt-get install postgresql`; `.ci/run` installs it) or FANOUT_POSTGRES_URL.
/// A suite that needs it says so with `.needsPostgreSQL` (skipped outside CI, with a message
/// saying how to enable it, as the page tests do for Chromium).
public final class PostgresServer: Sendable {
    /// `postgres://fanout@127.0.0.1:PORT/fanout` (user `fanout`, trusted, no password), or
    /// FANOUT_POSTGRES_URL.
    public let url: String
    public let port: Int
    /// The cluster's folder (`data/`, its socket, `server.log`); nil for FANOUT_POSTGRES_URL's server.
    public var directory: URL? { cluster?.directory }
    private let address: URLComponents
    /// Nil for FANOUT_POSTGRES_URL's server, which is not ours to stop.
    private let cluster: Cluster?
    private let stopped = NIOLockedValueBox(false)

    /// FANOUT_POSTGRES_URL, when set and not empty.
    private static let externalURL = ProcessInfo.processInfo.environment["FANOUT_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }

    /// The folder of PostgreSQL's programs, found without running any (trait conditions read it
    /// on the concurrency pool, where nothing may block): the first that holds `initdb` (else
    /// `psql`, enough for FANOUT_POSTGRES_URL's server) of the folder of the `pg_config` on the
    /// PATH (its `--bindir` in PostgreSQL's own install and Homebrew's) and the
    /// /usr/lib/postgresql/VERSION/bin, newest first: Debian's packages put none of the programs
    /// on the PATH, and their /usr/bin/pg_config is a wrapper that names the newest of those.
    private static let binDirectory: URL? = {
        let files = FileManager.default
        let pgConfigFolder = (ProcessInfo.processInfo.environment["PATH"] ?? "")
            .split(separator: ":")
            .map { URL(fileURLWithPath: String($0)).appending(path: "pg_config") }
            .first { files.isExecutableFile(atPath: $0.path) }?
            .resolvingSymlinksInPath().deletingLastPathComponent()
        let debian = URL(fileURLWithPath: "/usr/lib/postgresql")
        let versions = ((try? files.contentsOfDirectory(atPath: debian.path)) ?? [])
            .sorted { $0.compare($1, options: .numeric) == .orderedDescending }
            .map { debian.appending(path: $0).appending(path: "bin") }
        let folders = [pgConfigFolder].compactMap { $0 } + versions
        func holding(_ program: String) -> URL? {
            folders.first { files.isExecutableFile(atPath: $0.appending(path: program).path) }
        }
        return holding("initdb") ?? holding("psql")
    }()

    /// PostgreSQL's server programs are installed: `startCluster()` can run.
    public static var isInstalled: Bool {
        binDirectory.map { FileManager.default.isExecutableFile(atPath: $0.appending(path: "initdb").path) } ?? false
    }

    /// `start()` can run: PostgreSQL is installed or FANOUT_POSTGRES_URL names a server.
    public static var isAvailable: Bool { isInstalled || externalURL != nil }

    private init(address: URLComponents, cluster: Cluster?) {
        self.address = address
        url = address.string!  // parsed from a string, so it prints as one
        port = address.port ?? 5432
        self.cluster = cluster
    }

    /// FANOUT_POSTGRES_URL's server when it is set, else a new throwaway cluster.
    public static func start() async throws -> PostgresServer {
        guard let externalURL else { return try await startCluster() }
        guard let address = URLComponents(string: externalURL), address.host != nil else {
            throw PostgresServerError(
                description: "FANOUT_POSTGRES_URL is not a URL like postgres://user@host:port/database: \(externalURL)")
        }
        return PostgresServer(address: address, cluster: nil)
    }

    /// A new throwaway cluster even when FANOUT_POSTGRES_URL is set (the tests of this harness),
    /// with its database `fanout`; with `tls`, it offers TLS (`ssl = on`) with that certificate
    /// and key (PEM files, copied into the cluster's folder).
    public static func startCluster(tls: (certificate: URL, key: URL)? = nil) async throws -> PostgresServer {
        guard let binDirectory, isInstalled else {
            throw PostgresServerError(
                description:
                    "PostgreSQL is not installed (no initdb beside pg_config or in /usr/lib/postgresql/*/bin): apt-get install postgresql")
        }
        let cluster = Cluster(
            bin: binDirectory,
            directory: FileManager.default.temporaryDirectory.appending(path: "fanout-postgres-\(UUID().uuidString)"))
        let port: Int
        do {
            port = try await cluster.create(tls: tls)
        } catch {
            cluster.quit()
            await cluster.remove()
            throw error
        }
        let server = PostgresServer(address: URLComponents(string: "postgres://fanout@127.0.0.1:\(port)/fanout")!, cluster: cluster)
        do {
            _ = try await server.psql("CREATE DATABASE fanout", on: server.url(of: "postgres"))
        } catch {
            await server.stop()
            throw error
        }
        return server
    }

    /// A new empty database on this server, for one test to have to itself; returns its URL.
    /// `name` is lowercase letters, digits and `_`. FANOUT_POSTGRES_URL's server outlives the
    /// run, so there one of that name that an earlier run left is dropped first; on a cluster a
    /// name made twice is an error, as two tests would be sharing it.
    public func makeDatabase(named name: String) async throws -> String {
        guard name.count <= 63, name.range(of: "^[a-z_][a-z0-9_]*$", options: .regularExpression) != nil else {
            throw PostgresServerError(description: "not a plain database name: \(name)")
        }
        if cluster == nil { _ = try await psql("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        _ = try await psql("CREATE DATABASE \(name)")
        return url(of: name)
    }

    /// Runs the statements with psql (the one beside `initdb`) on `database` (a URL; this
    /// server's database by default), in one session, each on its own (so outside a
    /// transaction, as `CREATE DATABASE` must be), stopping at the first error. Returns what
    /// they printed: rows without a header, columns separated by `|`.
    public func psql(_ statements: String..., on database: String? = nil) async throws -> String {
        try await psql(statements, on: database)
    }

    /// `psql(_:on:)` with the statements as an array.
    public func psql(_ statements: [String], on database: String? = nil) async throws -> String {
        guard let psql = Self.binDirectory?.appending(path: "psql"), FileManager.default.isExecutableFile(atPath: psql.path) else {
            throw PostgresServerError(description: "psql is not installed: apt-get install postgresql-client")
        }
        let database = database ?? url
        let outcome = try await runToExit(
            executable: psql,
            ["--no-psqlrc", "--quiet", "--no-align", "--tuples-only", "--set", "ON_ERROR_STOP=1", "--dbname", database]
                + statements.flatMap { ["--command", $0] })
        guard outcome.status == 0, !outcome.timedOut else {
            throw PostgresServerError(description: "psql on \(database) failed", outcome)
        }
        return outcome.standardOutput
    }

    /// Stops the cluster (`pg_ctl stop -m fast`: sessions are ended, not waited for) and removes
    /// its folder. Does nothing the second time, nor to FANOUT_POSTGRES_URL's server.
    public func stop() async {
        let wasStopped = stopped.withLockedValue { stopped in
            defer { stopped = true }
            return stopped
        }
        guard let cluster, !wasStopped else { return }
        _ = try? await cluster.run("pg_ctl", ["stop", "--wait", "--timeout=60", "--mode=fast", "--pgdata", cluster.data.path])
        cluster.quit()
        await cluster.remove()
    }

    /// A test that threw before `stop()` leaves no server behind: it is told to quit now, and
    /// its folder is removed once it has, by a task, as a deinit cannot wait.
    deinit {
        guard let cluster, !stopped.withLockedValue({ $0 }) else { return }
        cluster.quit()
        Task { await cluster.remove() }
    }

    /// Stops the server but keeps the cluster, as a database that goes away under its users
    /// (`pg_ctl stop -m fast`; with `immediately`, `-m immediate`: every process quits at once,
    /// as in a crash, and the next start recovers); `resume()` starts it again on the same port.
    public func pause(immediately: Bool = false) async throws {
        guard let cluster else { throw PostgresServerError(description: "FANOUT_POSTGRES_URL's server is not ours to stop") }
        let mode = immediately ? "--mode=immediate" : "--mode=fast"
        let stopped = try await cluster.run("pg_ctl", ["stop", "--wait", "--timeout=60", mode, "--pgdata", cluster.data.path])
        guard stopped.status == 0, !stopped.timedOut else { throw PostgresServerError(description: "pg_ctl stop failed", stopped) }
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) every process of the cluster: a database that
    /// still accepts connections (the kernel does) but answers nothing, as behind a network
    /// partition. The postmaster first when freezing (it starts no session meanwhile), last
    /// when thawing.
    public func freeze(_ frozen: Bool) throws {
        guard let cluster else { throw PostgresServerError(description: "FANOUT_POSTGRES_URL's server is not ours to freeze") }
        guard let postmaster = cluster.postmasterID else { throw PostgresServerError(description: "the cluster is not running") }
        let children = Cluster.children(of: postmaster)
        for pid in frozen ? [postmaster] + children : children + [postmaster] {
            kill(pid, frozen ? SIGSTOP : SIGCONT)
        }
    }

    /// Starts a paused server again, on its port.
    public func resume() async throws {
        guard let cluster else { throw PostgresServerError(description: "FANOUT_POSTGRES_URL's server is not ours to start") }
        let started = try await cluster.run(
            "pg_ctl",
            [
                "start", "--wait", "--timeout=120", "--pgdata", cluster.data.path, "--log", cluster.log.path, "-o", "-p \(port)",
            ])
        guard started.status == 0, !started.timedOut else { throw PostgresServerError(description: "pg_ctl start failed", started) }
    }

    /// Stops the cluster when the test process exits, for a server shared by many tests that
    /// none of them may stop (Swift Testing has no end-of-run hook): an `atexit` handler sends
    /// the postmaster SIGQUIT and removes the folder once it has gone (5 s at most).
    public func stopWhenTheProcessExits() {
        guard let cluster else { return }
        let first = clustersToStopAtExit.withLockedValue { clusters in
            clusters.append(cluster)
            return clusters.count == 1
        }
        guard first else { return }
        atexit {
            for cluster in clustersToStopAtExit.withLockedValue({ $0 }) {
                cluster.quit()
                let deadline = Date().addingTimeInterval(5)
                while cluster.isRunning, Date() < deadline { usleep(10_000) }
                try? FileManager.default.removeItem(at: cluster.directory)
            }
        }
    }

    /// This server's URL with `database` for its database.
    private func url(of database: String) -> String {
        var address = address
        address.path = "/\(database)"
        return address.string!  // a plain name in a URL that was one
    }
}

/// The clusters `stopWhenTheProcessExits()` stops at exit.
private let clustersToStopAtExit = NIOLockedValueBox<[Cluster]>([])

/// A cluster's folder: `data/`, its Unix socket and `server.log`, the server's output.
private struct Cluster {
    let bin: URL
    let directory: URL
    var data: URL { directory.appending(path: "data") }
    var log: URL { directory.appending(path: "server.log") }

    /// PostgreSQL refuses to run as root, which the tests are in CI: there its programs run as
    /// `postgres` (the user Debian's package makes), who then owns the cluster's folder.
    private static let runsAsRoot = geteuid() == 0
    private static let postgresAccount = getpwnam("postgres").map { (uid: $0.pointee.pw_uid, gid: $0.pointee.pw_gid) }

    /// Makes the cluster and starts its server (offering TLS with `tls`'s certificate and key);
    /// returns the port it listens on.
    func create(tls: (certificate: URL, key: URL)? = nil) async throws -> Int {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if Self.runsAsRoot {
            guard let account = Self.postgresAccount else {
                throw PostgresServerError(
                    description:
                        "PostgreSQL refuses to run as root, and there is no postgres user to run it as (apt-get install postgresql makes one)"
                )
            }
            guard chown(directory.path, account.uid, account.gid) == 0 else {
                throw PostgresServerError(description: "cannot give \(directory.path) to the postgres user: errno \(errno)")
            }
        }
        // Any session from 127.0.0.1 is trusted; --no-sync: a test's cluster need not survive a crash.
        let initdb = try await run(
            "initdb",
            [
                "--pgdata", data.path, "--username", "fanout", "--auth", "trust",
                "--encoding", "UTF8", "--locale", "C", "--no-sync",
            ])
        guard initdb.status == 0, !initdb.timedOut else {
            throw PostgresServerError(description: "initdb failed", initdb)
        }
        let settings = """

            # PostgresServer (fanout's tests): reached over 127.0.0.1 only, nothing kept through a
            # crash of the machine, and room for tests that each hold a pool of connections. A
            # commit is written out before it is answered (synchronous_commit stays on), so what
            # was committed survives the server's processes quitting at once (`pause(immediately:)`):
            # with it off, the schema a test had just migrated was once lost that way.
            listen_addresses = '127.0.0.1'
            unix_socket_directories = '\(directory.path.replacingOccurrences(of: "'", with: "''"))'
            max_connections = 200
            fsync = off
            full_page_writes = off

            """ + (try installTLS(tls))
        let configuration = try FileHandle(forWritingTo: data.appending(path: "postgresql.conf"))
        try configuration.seekToEnd()
        try configuration.write(contentsOf: Data(settings.utf8))
        try configuration.close()
        // The port was free when looked at; another process may take it first, and then the
        // server cannot bind it: retry on another.
        var attempts = 1
        while true {
            let port = try freeLoopbackPort()
            let started = try await run(
                "pg_ctl",
                [
                    "start", "--wait", "--timeout=120", "--pgdata", data.path, "--log", log.path, "-o", "-p \(port)",
                ])
            if started.status == 0, !started.timedOut {
                raisePriority()
                return port
            }
            guard attempts < 3, serverLog.contains("Address already in use") else {
                throw PostgresServerError(description: "pg_ctl start failed", started, log: serverLog)
            }
            attempts += 1
        }
    }

    /// Copies a certificate and its key into the cluster's folder, readable by the server's
    /// account only (PostgreSQL refuses a key others may read), and returns the settings that
    /// offer TLS with them; "" without.
    private func installTLS(_ tls: (certificate: URL, key: URL)?) throws -> String {
        guard let tls else { return "" }
        let certificate = directory.appending(path: "server.crt")
        let key = directory.appending(path: "server.key")
        try FileManager.default.copyItem(at: tls.certificate, to: certificate)
        try FileManager.default.copyItem(at: tls.key, to: key)
        for file in [certificate, key] {
            if Self.runsAsRoot, let account = Self.postgresAccount {
                guard chown(file.path, account.uid, account.gid) == 0 else {
                    throw PostgresServerError(description: "cannot give \(file.path) to the postgres user: errno \(errno)")
                }
            }
            guard chmod(file.path, 0o600) == 0 else { throw PostgresServerError(description: "cannot chmod \(file.path): errno \(errno)") }
        }
        return """
            ssl = on
            ssl_cert_file = '\(certificate.path)'
            ssl_key_file = '\(key.path)'

            """
    }

    /// Gives the cluster's postmaster (and the sessions it forks from now on) a higher CPU
    /// priority when the tests run as root: the whole suite's servers share two cores with it,
    /// and a session starved past the store's 4 s bound failed tests that were not about load.
    /// Nice −5, not more: at −10 the sessions of the suite's busiest PostgreSQL tests took most
    /// of both cores, and in-process servers of other tests sent nothing for 30 s (tests that
    /// are not about the deadline now give the store 30 s, `PostgresCartStore.testDeadline`).
    private func raisePriority() {
        guard Self.runsAsRoot,
            let pidLine = try? String(contentsOf: data.appending(path: "postmaster.pid"), encoding: .utf8).split(separator: "\n").first,
            let pid = Int32(pidLine)
        else { return }
        #if canImport(Glibc)
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(pid), -5)
        #endif
    }

    /// Runs one of the cluster's programs, as `postgres` when the tests run as root, with no open
    /// file but the standard three: the server `pg_ctl start` leaves running would otherwise
    /// keep the socket by which Foundation's Process learns that its child exited, and the wait
    /// for pg_ctl would never end.
    func run(_ program: String, _ arguments: [String]) async throws -> ProcessOutcome {
        let command =
            (Self.runsAsRoot ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []) + [bin.appending(path: program).path] + arguments
        let closingInheritedFiles = #"for fd in /proc/self/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done; exec "$@""#
        return try await runToExit(
            executable: URL(fileURLWithPath: "/bin/bash"), ["-c", closingInheritedFiles, "bash"] + command, timeout: .seconds(180))
    }

    /// Tells a postmaster still running in the folder (its pid file is there until it exits)
    /// to quit at once: after `pg_ctl` failed to start or stop it, or for a dropped server.
    func quit() {
        if let postmasterID { kill(postmasterID, SIGQUIT) }
    }

    /// The postmaster's process id, from its pid file.
    var postmasterID: pid_t? {
        (try? String(contentsOf: pidFile, encoding: .utf8))?.split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// The processes whose parent is `parent` (from /proc: Linux).
    static func children(of parent: pid_t) -> [pid_t] {
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return processes.compactMap { pid_t($0) }.filter { pid in
            // "pid (name) state ppid …": the name may hold spaces, not a ')'.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { return false }
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == parent
        }
    }

    /// Removes the folder once its postmaster has gone (a server still writing there would
    /// leave some of it behind), or after 10 s.
    func remove() async {
        let deadline = ContinuousClock.now + .seconds(10)
        while FileManager.default.fileExists(atPath: pidFile.path), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Whether its postmaster is still there (it removes its pid file on the way out).
    var isRunning: Bool { FileManager.default.fileExists(atPath: pidFile.path) }

    private var pidFile: URL { data.appending(path: "postmaster.pid") }
    private var serverLog: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "(no server log)" }
}

/// A PostgreSQL program failed, or the harness cannot start one: what, with their output.
public struct PostgresServerError: Error, CustomStringConvertible {
    public let description: String

    init(description: String) { self.description = description }

    init(description: String, _ outcome: ProcessOutcome, log: String? = nil) {
        var text = "\(description) (\(outcome.timedOut ? "timed out" : "exit status \(outcome.status)")):\n"
        text += outcome.standardOutput + outcome.standardError
        if let log { text += "\nserver log:\n\(log)" }
        self.description = text
    }
}

extension Trait where Self == ConditionTrait {
    /// Runs where a PostgreSQL server can be had, and always in CI (where a missing one fails);
    /// elsewhere skips, saying how to enable it.
    public static var needsPostgreSQL: Self {
        .enabled(
            if: PostgresServer.isAvailable || runningInCI,
            "apt-get install postgresql (or set FANOUT_POSTGRES_URL) enables the PostgreSQL tests")
    }

    /// The same for tests that stop and start the server themselves: FANOUT_POSTGRES_URL's
    /// server will not do, they need PostgreSQL's programs.
    public static var needsPostgreSQLPrograms: Self {
        .enabled(
            if: PostgresServer.isInstalled || runningInCI, "apt-get install postgresql enables the tests that stop and restart PostgreSQL")
    }
}

import Foundation

/// The cluster the PostgreSQL stores of this test process share, started on first use and
/// stopped when the process exits.
public actor SharedPostgres {
    public static let shared = SharedPostgres()
    /// The one start: the actor is re-entered while a start awaits, so callers share its task
    /// rather than each starting a cluster.
    private var starting: Task<PostgresServer, any Error>?
    private var databases = 0

    public func server() async throws -> PostgresServer {
        let start =
            starting
            ?? Task {
                let server = try await PostgresServer.start()
                server.stopWhenTheProcessExits()
                return server
            }
        starting = start
        return try await start.value
    }

    /// A new empty database on the shared server; returns its URL.
    public func newDatabase() async throws -> String {
        let server = try await server()
        databases += 1
        return try await server.makeDatabase(named: "store_\(databases)_\(UInt32.random(in: 0...UInt32.max))")
    }
}

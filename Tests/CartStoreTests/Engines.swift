import CartStorePostgres
import FanoutTestSupport
import Foundation
import Testing

@testable import CartStore

/// The engines the store's behaviour tests run on: SQLite always, PostgreSQL when a server can
/// be had (always in CI). The PostgreSQL stores share one throwaway cluster for the whole run,
/// each in a database of its own.
enum Engine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgresql

    static let available: [Engine] = {
        if fastTestsOnly {
            FileHandle.standardError.write(Data("note: FANOUT_FAST_TESTS is set: the store's tests run on SQLite only\n".utf8))
            return [.sqlite]
        }
        if PostgresServer.isAvailable || runningInCI { return allCases }
        FileHandle.standardError.write(
            Data(
                "note: the store's tests run on SQLite only: apt-get install postgresql (or set FANOUT_POSTGRES_URL) to run them on PostgreSQL too\n"
                    .utf8))
        return [.sqlite]
    }()

    var testDescription: String { rawValue }

    /// A new, empty store. Its test closes it (`defer`): a PostgreSQL store's pool and follower
    /// run until then, and a full run opens dozens.
    func makeStore() async throws -> CartStore {
        switch self {
        case .sqlite:
            return try CartStore.inMemory()
        case .postgresql:
            let database = try await SharedPostgres.shared.newDatabase()
            return try await PostgresCartStore.running(url: database)
        }
    }
}

/// The cluster the PostgreSQL stores of this test process share, started on first use and
/// stopped when the process exits.
actor SharedPostgres {
    static let shared = SharedPostgres()
    /// The one start: the actor is re-entered while a start awaits, so callers share its task
    /// rather than each starting a cluster.
    private var starting: Task<PostgresServer, any Error>?
    private var databases = 0

    func server() async throws -> PostgresServer {
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
    func newDatabase() async throws -> String {
        let server = try await server()
        databases += 1
        return try await server.makeDatabase(named: "store_\(databases)_\(UInt32.random(in: 0...UInt32.max))")
    }
}

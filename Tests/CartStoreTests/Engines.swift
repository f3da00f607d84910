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

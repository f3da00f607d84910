import CartStore
import CartStorePostgres

extension PostgresCartStore {
    /// A store in the PostgreSQL database at `url`, its service run by a task of its own until
    /// the store is closed: for tests that use it as they use a SQLite store.
    public static func running(url: String, deadline: Duration = defaultDeadline) async throws -> CartStore {
        let postgres = try await PostgresCartStore(url: url, deadline: deadline)
        Task { try await postgres.run() }
        return postgres.store
    }
}

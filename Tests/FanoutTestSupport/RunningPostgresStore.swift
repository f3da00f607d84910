import CartStore
import CartStorePostgres

extension PostgresCartStore {
    /// The deadline of the tests that are not about it.
    public static let testDeadline: Duration = .seconds(30)

    /// A store in the PostgreSQL database at `url`, its service run by a task of its own until
    /// the store is closed: for tests that use it as they use a SQLite store.
    ///
    /// Tests of what the store does allow a use of the database 30 s (`testDeadline`): the
    /// whole suite starts at once on one shared cluster, and on two busy cores a use has taken
    /// more than the default 4 s. The deadline's own tests pass `defaultDeadline`.
    public static func running(url: String, deadline: Duration = testDeadline) async throws -> CartStore {
        let postgres = try await PostgresCartStore(url: url, deadline: deadline)
        Task { try await postgres.run() }
        return postgres.store
    }
}

import FanoutTestSupport
import Foundation
import GRDB
import Testing

@testable import CartStore
@testable import CartStorePostgres

@Suite("Migrations")
struct MigrationTests {
    static let sources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "Sources")

    /// A migration file added to a folder but not to Package.swift's resources and the
    /// engine's list would never run: each engine carries exactly its folder's files.
    @Test(arguments: [
        ("CartStore/SQLite/Migrations", Schema.migrations), ("CartStorePostgres/Migrations", PostgresSchema.migrations),
    ])
    func theBinaryCarriesExactlyTheFilesOfItsMigrationsFolder(folder: String, carried: [EmbeddedMigration]) throws {
        let files = try FileManager.default.contentsOfDirectory(at: Self.sources.appending(path: folder), includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        #expect(!files.isEmpty)
        #expect(carried.map(\.name) == files.map { $0.deletingPathExtension().lastPathComponent })
        for (migration, file) in zip(carried, files) {
            #expect(migration.sql == (try String(contentsOf: file, encoding: .utf8)), "\(migration.name) differs from its file")
        }
        #expect(CartStore.schemaMigrations == Schema.migrations.map(\.name))
    }

    @Test func migrationsAreNumberedAndAppliedOnceAcrossReopens() throws {
        for name in CartStore.schemaMigrations {
            #expect(name.prefix(4).allSatisfy { $0.isNumber }, "\(name) should start with a 4-digit number")
        }
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        _ = try CartStore(path: path)
        _ = try CartStore(path: path)
        let queue = try DatabaseQueue(path: path)
        let applied = try queue.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(applied == CartStore.schemaMigrations)
        #expect(try queue.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") } == "wal")
    }

    @Test func aDatabaseFromANewerSchemaIsRefused() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        _ = try CartStore(path: path)
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('9999_from_the_future')")
        }
        try queue.close()
        do {
            _ = try CartStore(path: path)
            Issue.record("a newer schema must be refused")
        } catch let error as CartStoreError {
            #expect(error.code == .schemaTooNew)
            #expect(error.message.contains("9999_from_the_future"))
        }
    }

    @Test(arguments: [(CartStore.Durability.full, 2), (.normal, 1)])
    func durabilityIsInForceOnTheWritingConnection(durability: CartStore.Durability, pragma: Int) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let store = try CartStore(path: directory.path("store.sqlite"), durability: durability)
        let synchronous = try await store.sqlite.writer.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(synchronous == pragma)
    }

    @Test func dataSurvivesReopening() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        do {
            let store = try CartStore(path: path, durability: .normal)
            try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 7)
            try store.close()
        }
        let reopened = try CartStore(path: path)
        #expect(try await reopened.cart("c")?.items.first?.quantity == 2)
        let next = try await reopened.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1)
        #expect(next.event.seq == 2)
    }

    /// A database's identity is made with it, kept in its file, and read again as it was.
    @Test func theIdentityIsMadeWithTheDatabaseAndSurvivesReopening() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        let made: String
        do {
            let store = try CartStore(path: path)
            made = store.databaseID
            try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
            try store.close()
        }
        #expect(isDatabaseIdentity(made), "\(made)")
        let reopened = try CartStore(path: path)
        #expect(reopened.databaseID == made)
        try reopened.close()

        let other = try CartStore(path: directory.path("other.sqlite"))
        #expect(isDatabaseIdentity(other.databaseID))
        #expect(other.databaseID != made, "each new database its own")
        #expect(try CartStore.inMemory().databaseID != (try CartStore.inMemory().databaseID))
    }

    /// A database made before identities (migrated up to 0002) gets one when it is migrated,
    /// and keeps its carts; it is the same the next time.
    @Test func aDatabaseFromBeforeIdentitiesGetsOneWhenMigrated() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        do {
            let store = try CartStore(path: path)
            try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 1)
            try store.close()
        }
        // Back to the schema of before: no identity, and 0003 not applied.
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in
            try db.execute(sql: "DROP TABLE database_identity")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = '0003_database_identity'")
        }
        try queue.close()

        let migrated = try CartStore(path: path)
        let identity = migrated.databaseID
        #expect(isDatabaseIdentity(identity))
        #expect(try await migrated.cart("c")?.items.first?.quantity == 2)
        try migrated.close()
        #expect(try CartStore(path: path).databaseID == identity)
    }
}

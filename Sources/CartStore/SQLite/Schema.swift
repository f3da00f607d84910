import Foundation
import GRDB

/// One numbered SQL file of a target's `Migrations` folder, compiled into the binary
/// (`.embedInCode` in Package.swift: `PackageResources`).
package struct EmbeddedMigration: Sendable {
    package let name: String
    package let sql: String

    package init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }

    /// The migration `name` of a file's bytes, as `PackageResources` holds them.
    package init(_ name: String, _ bytes: [UInt8]) {
        self.init(name: name, sql: String(decoding: bytes, as: UTF8.self))
    }
}

/// The database schema: the migrations of `SQLite/Migrations`, applied in order, each once. A
/// new one is a file there, a line in Package.swift's resources and one here; a test checks the
/// folder and this list agree.
enum Schema {
    static let migrations = [
        EmbeddedMigration("0001_create_carts", PackageResources._001_create_carts_sql),
        EmbeddedMigration("0002_idempotency_keys", PackageResources._002_idempotency_keys_sql),
        EmbeddedMigration("0003_database_identity", PackageResources._003_database_identity_sql),
    ]

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in migrations {
            migrator.registerMigration(migration.name) { db in
                try db.execute(sql: migration.sql)
            }
        }
        return migrator
    }

    /// Refuses a file that another program made: one with tables but none of the migrations
    /// table this store writes, or not a SQLite database at all. It is read without writing (a
    /// read-only connection, before the store switches the file to WAL mode), so it is left as
    /// it was. A missing or empty file is a new database.
    static func refuseForeignDatabase(at path: String) throws {
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        guard size > 0 else { return }
        var configuration = Configuration()
        configuration.readonly = true
        let tables: [String]
        do {
            let queue = try DatabaseQueue(path: path, configuration: configuration)
            tables = try queue.read { db in
                try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            }
            try queue.close()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB {
            throw CartStoreError(.notAFanoutDatabase, "\(path) is not a SQLite database; it was left untouched")
        } catch {
            throw CartStoreError.storage(error)
        }
        guard tables.isEmpty || tables.contains("grdb_migrations") else {
            throw CartStoreError(
                .notAFanoutDatabase,
                "\(path) belongs to another program (tables: \(tables.sorted().prefix(5).joined(separator: ", "))); it was left untouched")
        }
    }

    /// Brings the database up to this binary's schema, refusing one written by a newer binary.
    /// Returns the migrations it applied, in order.
    @discardableResult
    static func migrate(_ writer: any DatabaseWriter) throws -> [String] {
        let migrator = migrator
        let applied = try writer.read { db in try migrator.appliedIdentifiers(db) }
        let unknown = applied.subtracting(migrator.migrations)
        guard unknown.isEmpty else {
            throw CartStoreError(
                .schemaTooNew,
                "the database was migrated by a newer version (unknown migrations: \(unknown.sorted().joined(separator: ", "))); upgrade this program or use another database"
            )
        }
        try migrator.migrate(writer)
        return migrator.migrations.filter { !applied.contains($0) }
    }

    /// The identity migration 0003 gave the database (`CartStore.databaseID`).
    static func databaseID(_ reader: any DatabaseReader) throws -> String {
        guard let id = try reader.read({ db in try String.fetchOne(db, sql: "SELECT id FROM database_identity") }) else {
            throw CartStoreError(.storeUnavailable, "the database has lost its identity (database_identity is empty)")
        }
        return id
    }
}

import GRDB

/// One numbered SQL file of `migrations/`, compiled into the binary by the EmbedMigrations plugin.
struct EmbeddedMigration: Sendable {
    let name: String
    let sql: String
}

/// The database schema: the embedded migrations, applied in order, each once.
enum Schema {
    static var migrations: [EmbeddedMigration] { embeddedMigrations }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in embeddedMigrations {
            migrator.registerMigration(migration.name) { db in
                try db.execute(sql: migration.sql)
            }
        }
        return migrator
    }

    /// Brings the database up to this binary's schema, refusing one written by a newer binary.
    static func migrate(_ writer: any DatabaseWriter) throws {
        let migrator = migrator
        let unknown = try writer.read { db in
            try migrator.appliedIdentifiers(db).subtracting(migrator.migrations)
        }
        guard unknown.isEmpty else {
            throw CartStoreError(
                .schemaTooNew,
                "the database was migrated by a newer version (unknown migrations: \(unknown.sorted().joined(separator: ", "))); upgrade this program or use another database")
        }
        try migrator.migrate(writer)
    }
}

import CartStore
import Foundation
import Logging
import PostgresNIO

/// The PostgreSQL schema: the files of `Migrations`, carried in the binary, applied in
/// order, each once, recorded in `fanout_migrations`. Several servers may start at once on one
/// database: the migrations run in one transaction under an advisory lock, so one applies them
/// and the others find them applied.
enum PostgresSchema {
    static let migrations = [
        EmbeddedMigration("0001_create_carts", PackageResources._001_create_carts_sql),
        EmbeddedMigration("0002_idempotency_keys", PackageResources._002_idempotency_keys_sql),
        EmbeddedMigration("0003_database_identity", PackageResources._003_database_identity_sql),
        EmbeddedMigration("0004_presence", PackageResources._004_presence_sql),
        EmbeddedMigration("0005_lines_without_foreign_key", PackageResources._005_lines_without_foreign_key_sql),
        EmbeddedMigration("0006_carts_change_through_fanout", PackageResources._006_carts_change_through_fanout_sql),
    ]

    /// The advisory lock key of migrations (any constant; "fanout" in ASCII).
    private static let migrationLock: Int64 = 0x66_61_6e_6f_75_74

    /// Returns the migrations it applied, in order.
    @discardableResult
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.withTransaction(logger: logger) { connection in
            // Another server may be migrating: wait for it, however long it takes.
            try await connection.query("SET LOCAL lock_timeout = 0", logger: logger)
            try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
            let hasLedger =
                try await connection.query(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'fanout_migrations'",
                    logger: logger
                ).collect().first?.decode(Int64.self) ?? 0
            if hasLedger == 0 {
                let tables =
                    try await connection.query(
                        "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()", logger: logger
                    ).collect().first?.decode(Int64.self) ?? 0
                guard tables == 0 else {
                    throw CartStoreError(
                        .notAFanoutDatabase,
                        "the database has tables of another program's (and no fanout_migrations); it was left untouched")
                }
                try await connection.query(
                    "CREATE TABLE fanout_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
                    logger: logger)
            }
            var applied = Set<String>()
            for try await name in try await connection.query("SELECT name FROM fanout_migrations", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            let known = Set(migrations.map(\.name))
            if let unknown = applied.subtracting(known).sorted().first {
                throw CartStoreError(
                    .schemaTooNew, "the database was migrated by a newer version (migration \(unknown)); upgrade this server")
            }
            var appliedNow: [String] = []
            for migration in migrations where !applied.contains(migration.name) {
                for statement in statements(in: migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO fanout_migrations (name) VALUES (\(migration.name))", logger: logger)
                appliedNow.append(migration.name)
            }
            return appliedNow
        }
    }

    /// The statements of a migration file (the extended protocol takes one per query): split at
    /// semicolons outside a function's `$$` body, `--` comments dropped. The files are plain DDL
    /// and function bodies, with no semicolon or `--` inside a string.
    static func statements(in sql: String) -> [String] {
        let lines = sql.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.range(of: "--").map { line[..<$0.lowerBound] } ?? line
        }
        var statements: [String] = []
        var current = ""
        // The text alternates outside and inside `$$` bodies: only outside do semicolons end one.
        for (index, part) in lines.joined(separator: "\n").components(separatedBy: "$$").enumerated() {
            guard index % 2 == 0 else {
                current += "$$" + part + "$$"
                continue
            }
            let pieces = part.split(separator: ";", omittingEmptySubsequences: false)
            for (position, piece) in pieces.enumerated() {
                current += piece
                if position < pieces.count - 1 {
                    statements.append(current)
                    current = ""
                }
            }
        }
        statements.append(current)
        return statements.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
    }
}

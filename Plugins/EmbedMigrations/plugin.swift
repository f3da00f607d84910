import Foundation
import PackagePlugin

/// Compiles the package's migrations into the target as Swift source: `migrations/*.sql`
/// (SQLite) into CartStore, `migrations/postgresql/*.sql` into CartStorePostgres.
///
/// The SQL files at the repository root stay the one source of the schema; the binaries carry
/// them, so a server started from any directory migrates its database the same way.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let migrationsDirectory = context.package.directoryURL.appending(path: "migrations")
        let directory = target.name == "CartStorePostgres" ? migrationsDirectory.appending(path: "postgresql") : migrationsDirectory
        let files = try FileManager.default
            .contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(files.count) migrations into \(target.name)",
                executable: try context.tool(named: "embed-migrations").url,
                arguments: [output.path] + files.map(\.path),
                inputFiles: files,
                outputFiles: [output]
            )
        ]
    }
}

import ArgumentParser
import CartStore
import Foundation

/// `fanout-server backup --db FILE --to FILE`: a consistent copy of a SQLite database, taken
/// while a server runs on it.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy a SQLite database to a new file while a server runs on it (SQLite's online backup).",
        discussion: """
            The copy holds every change committed before it began and none after, its event log
            gap-free, and the database's identity: restored, it is the same database (docs/OPERATING.md,
            Backups). A PostgreSQL database is backed up with pg_dump.
            Example: fanout-server backup --db ./fanout.sqlite --to ./fanout-2026-11-27.sqlite
            """)

    @OptionGroup var source: FanoutServerCommand.DatabaseOptions

    @Option(name: .customLong("to"), help: ArgumentHelp("The new file to write (never overwritten).", valueName: "path"))
    var destination: String

    func validate() throws {
        guard source.named != nil else { throw ValidationError("--db names the SQLite database file to copy") }
    }

    func run() async throws {
        let database = source.named ?? ""
        let backup: CartStore.Backup
        do {
            backup = try CartStore.backup(databaseAt: database, to: destination)
        } catch let error as CartStoreError {
            throw StartupFailure(description: "cannot back up \(CartStore.printableLocation(database)): \(error.message)")
        } catch {
            throw StartupFailure(description: "cannot back up \(CartStore.printableLocation(database)): \(error)")
        }
        print("backed up \(database) to \(destination): events through seq \(backup.latestSeq), database \(backup.databaseID)")
    }
}

import Foundation
import GRDB
import Testing

@testable import CartStore

/// The database file: who may open it, what is refused, and storage failures.
@Suite("Database file")
struct StoreFileTests {
    @Test func aSecondStoreOnTheSameFileIsRefusedUntilTheFirstCloses() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        let first = try CartStore(path: path)
        #expect(Self.refusal { try CartStore(path: path) }?.code == .databaseInUse)
        try first.close()
        try CartStore(path: path).close()
    }

    @Test func aStoreInAnotherProcessHoldsTheFileUntilItDies() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        let (process, output) = try await CrashSurvivalTests.startWriter(path)
        // It holds the store once it printed its first mutation.
        _ = await output.first { _ in true }
        let refusal = Self.refusal { try CartStore(path: path) }
        #expect(refusal?.code == .databaseInUse)
        #expect(refusal?.message.contains(path) == true, "the message names the file")
        await process.kill()
        // The kernel released the lock with the process.
        let store = try CartStore(path: path)
        #expect(try await store.latestSeq() > 0)
        try store.close()
    }

    @Test func anotherProgramsDatabaseIsRefusedAndLeftUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("theirs.sqlite")
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO customers (name) VALUES ('ada')")
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(Self.refusal { try CartStore(path: path) }?.code == .notAFanoutDatabase)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "not one byte changed")
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test func aFileThatIsNotADatabaseIsRefusedAndLeftUntouched() throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("notes.txt")
        let text = Data(String(repeating: "shopping list: apples, pears\n", count: 200).utf8)
        try text.write(to: URL(fileURLWithPath: path))
        #expect(Self.refusal { try CartStore(path: path) }?.code == .notAFanoutDatabase)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == text)
    }

    @Test func aFullDiskAndAnUnwritableDatabaseAreTheStoresOwnErrors() {
        #expect(CartStoreError.code(CartStoreError.storage(DatabaseError(resultCode: .SQLITE_FULL))) == .storageFull)
        #expect(CartStoreError.code(CartStoreError.storage(DatabaseError(resultCode: .SQLITE_READONLY))) == .storeUnavailable)
        #expect(CartStoreError.code(CartStoreError.storage(DatabaseError(resultCode: .SQLITE_IOERR))) == .storeUnavailable)
        #expect(CartStoreError.code(CartStoreError.storage(DatabaseError(resultCode: .SQLITE_CONSTRAINT))) == nil, "others pass through")
    }

    @Test func aDatabaseThatCannotBeWrittenSaysSoInsteadOfFailingEveryWrite() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.cleanup() }
        let path = directory.path("store.sqlite")
        let writable = try CartStore(path: path)
        try await writable.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await writable.checkWritable()
        try writable.close()
        // As a read-only file or mount would open (tests run as root, where modes do not stop writes).
        var configuration = Configuration()
        configuration.readonly = true
        let readOnly = try CartStore(writer: DatabasePool(path: path, configuration: configuration))
        await #expect { try await readOnly.checkWritable() } throws: { CartStoreError.code($0) == .storeUnavailable }
        await #expect { try await readOnly.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1) } throws: {
            CartStoreError.code($0) == .storeUnavailable
        }
        #expect(try await readOnly.cart("c")?.items.count == 1, "nothing was written")
    }
}

extension StoreFileTests {
    /// The store error that opening threw; nil (and the store closed) when it opened.
    static func refusal(_ open: () throws -> CartStore) -> CartStoreError? {
        do {
            try open().close()
            return nil
        } catch {
            return error as? CartStoreError
        }
    }
}

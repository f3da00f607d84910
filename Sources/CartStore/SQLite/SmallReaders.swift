import Foundation
import GRDB
import NIOConcurrencyHelpers

/// Read-only connections to a database file for small reads run on the caller's thread (a
/// few carts, a short page of events: tens of microseconds of SQLite).
///
/// GRDB's synchronous read on a pool costs several times such a read around it: four dispatch
/// barriers, a semaphore and a group to take and give back a reader, a schema check, and a
/// transaction begun and committed through SQL parsed again each time. Here a connection is
/// taken from a list under one lock, and the transaction's statements are cached.
///
/// At most `limit` connections are opened, as callers need them. When every one is in use, or
/// another cannot be opened (out of descriptors, say), the read is not waited for here: `read`
/// answers nil and the caller reads through GRDB's pool instead (`SQLiteBackend.read(small:_:)`),
/// whose connections are already open, so a caller never blocks on another's read and a read
/// does not fail for want of a connection of this set.
final class SmallReaders: Sendable {
    private struct State {
        var idle: [DatabaseQueue] = []
        var opened = 0
        var closed = false
    }

    private let path: String
    private let configuration: Configuration
    /// The most connections open at once.
    let limit: Int
    private let state = NIOLockedValueBox(State())

    /// Readers of the pool's file, configured as its own are.
    init(of pool: DatabasePool, limit: Int = max(2, ProcessInfo.processInfo.activeProcessorCount)) {
        var configuration = pool.configuration
        configuration.readonly = true
        self.path = pool.path
        self.configuration = configuration
        self.limit = limit
    }

    /// `body` in one read transaction, on the caller's thread; nil, without running it, when
    /// no reader is free.
    func read<T>(_ body: (Database) throws -> T) throws -> T? {
        guard let reader = take() else { return nil }
        defer { giveBack(reader) }
        return try reader.inDatabase { db in
            try db.cachedStatement(sql: "BEGIN DEFERRED TRANSACTION").execute()
            do {
                let value = try body(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                return value
            } catch {
                try? db.rollback()
                throw error
            }
        }
    }

    /// Closes the idle readers; one in use is closed when given back.
    func close() {
        let idle = state.withLockedValue { state in
            state.closed = true
            defer { state.idle.removeAll() }
            return state.idle
        }
        for reader in idle { try? reader.close() }
    }

    private func take() -> DatabaseQueue? {
        enum Taken {
            case reader(DatabaseQueue)
            case open
            case none
        }
        let taken = state.withLockedValue { state -> Taken in
            if let reader = state.idle.popLast() { return .reader(reader) }
            guard !state.closed, state.opened < limit else { return .none }
            state.opened += 1
            return .open
        }
        switch taken {
        case .reader(let reader):
            return reader
        case .none:
            return nil
        case .open:
            do {
                return try DatabaseQueue(path: path, configuration: configuration)
            } catch {
                state.withLockedValue { $0.opened -= 1 }
                return nil
            }
        }
    }

    private func giveBack(_ reader: DatabaseQueue) {
        let keep = state.withLockedValue { state in
            guard !state.closed else { return false }
            state.idle.append(reader)
            return true
        }
        if !keep { try? reader.close() }
    }
}

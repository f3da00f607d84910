import FanoutProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// What a `RemoteCartStore` made of its cache file when it opened.
public enum ReplicaCacheState: Sendable, Hashable {
    /// No cache file was given: the replica lives in memory only.
    case none
    /// The file is being opened and read, off the caller's thread: the store connects, and
    /// takes writes, once it is (`RemoteCartStore.cacheFileOpened()` waits for it); the
    /// observers added meanwhile are told the carts it holds.
    case opening
    /// The file held no replica yet (a new file, or one of a store that never loaded).
    case empty
    /// The replica was restored from the file: its carts, as of `seq`, saved at `savedAt`, and
    /// `pendingWrites` writes the server had not confirmed. The store resumes after `seq` (nil:
    /// the file held pending writes only, no carts had been loaded).
    case restored(seq: Int64?, savedAt: Date, pendingWrites: Int)
    /// The file could not be used and was started anew (the replica is loaded from the server):
    /// why, for the app's logs.
    case discarded(CacheProblem)
    /// Saving to the file failed (`reason`); the replica goes on in memory, unsaved.
    case failing(String)
}

/// Why a cache file was not used.
public enum CacheProblem: Sendable, Hashable {
    /// It was written for another server (`url`).
    case otherServer(String)
    /// It is not a replica file, is damaged or half-written, or is of a newer format.
    case unreadable(String)
}

/// A `RemoteCartStore`'s replica in a SQLite file (GRDB): the carts it follows with the seq they
/// reflect, the server's database identity, and the writes the server has not confirmed.
///
/// Saved off the caller's thread: each change of the replica is queued, in order, and a thread
/// of the file's own writes the queue in one transaction at a time (`drain`), so neither the
/// app's main thread nor the replica's lock ever waits on the disk. What survives a process
/// killed at any moment: a prefix of the replica's changes, each whole (a cart and the seq it
/// reflects go together: the next start resumes after that seq and reads the rest again), and
/// every write whose call had returned (a write taken is synced before its call returns,
/// `addPending`).
package final class ReplicaFile: @unchecked Sendable {  // GRDB's queue serialises; the rest is behind `backlog`'s lock.
    private let queue: DatabaseQueue
    /// Why a save failed: the file is left alone from then on.
    private let failed = NIOLockedValueBox<String?>(nil)
    var failure: String? { failed.withLockedValue { $0 } }

    /// The changes queued for the file's thread, in order, numbered, with the callers waiting
    /// for a synced one. At most `maxBacklog`: past it the caller writes the backlog itself, on
    /// its thread, as it did before the file had a thread.
    private struct Backlog {
        var changes: [(Database) throws -> Void] = []
        /// How many changes were ever queued, and written.
        var queued = 0
        var written = 0
        /// A change queued since the last batch must be synced (a write taken).
        var syncWanted = false
        /// Callers waiting until the changes up to a number are written and synced.
        var waiters: [(upTo: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var draining = false
    }
    private let backlog = NIOLockedValueBox(Backlog())
    /// Held by the one who writes a batch, from taking it to resuming its waiters: batches are
    /// written in the order they were queued, whoever writes them.
    private let writing = NIOLock()
    private let writer = DispatchQueue(label: "fanout.replica-file")
    static let maxBacklog = 4_096

    /// The replica a file held.
    struct Saved {
        var carts: [String: Cart]
        /// Nil when no carts had been loaded (the file holds pending writes only).
        var covered: CartSelection?
        var seq: Int64?
        var databaseID: String?
        var savedAt: Date
        var pending: [PendingWrite]
    }

    static let format = 1

    private init(queue: DatabaseQueue) {
        self.queue = queue
    }

    /// A connection in WAL mode, synced at checkpoints only (`synchronous = NORMAL`): an applied
    /// event costs one write without a sync, and a process killed at any moment loses nothing
    /// (the operating system has the bytes); a power cut may lose the last events, which the
    /// next start reads again after the older seq. A write taken is synced (`addPending`).
    private static func connection(_ url: URL) throws -> DatabaseQueue {
        var configuration = Configuration()
        // A file another store still holds (the app's previous one, still closing) is waited
        // for, not taken for a broken file.
        configuration.busyMode = .timeout(busyTimeout)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        return try DatabaseQueue(path: url.path, configuration: configuration)
    }

    /// How long opening waits for a file another connection holds.
    static let busyTimeout: TimeInterval = 5

    /// Opens the file at `url` for `server`, and what it held. A file that cannot be read as one
    /// is removed and started anew, with the reason; a file that cannot be made at all gives no
    /// file (the replica stays in memory) and the reason.
    static func open(_ url: URL, server: URL) -> (file: ReplicaFile?, saved: Saved?, state: ReplicaCacheState) {
        do {
            let file = try ReplicaFile(queue: connection(url))
            do {
                let saved = try file.read(server: server)
                guard let saved else { return (file, nil, .empty) }
                return (file, saved, .restored(seq: saved.seq, savedAt: saved.savedAt, pendingWrites: saved.pending.count))
            } catch let problem as Problem {
                try file.reset(server: server)
                return (file, nil, .discarded(problem.problem))
            }
        } catch let error as DatabaseError where [.SQLITE_BUSY, .SQLITE_LOCKED].contains(error.resultCode) {
            // In use past the wait: kept as it is (it may hold pending writes), and this store
            // keeps its replica in memory.
            return (nil, nil, .failing("the cache file is in use by another store (still closing?) and was left as it is: \(error)"))
        } catch {
            // Not a database at all (or half of one): remove it and its journals, start anew.
            for suffix in ["", "-wal", "-shm", "-journal"] {
                try? FileManager.default.removeItem(atPath: url.path + suffix)
            }
            do {
                let file = try ReplicaFile(queue: connection(url))
                try file.reset(server: server)
                return (file, nil, .discarded(.unreadable("\(error)")))
            } catch {
                return (nil, nil, .failing("the cache file cannot be made: \(error)"))
            }
        }
    }

    private struct Problem: Error {
        let problem: CacheProblem
    }

    /// The replica in the file, nil if it holds none; `Problem` if it is not this server's or
    /// cannot be read.
    private func read(server: URL) throws -> Saved? {
        try queue.write { db in
            let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
            if version == 0 {
                try Self.create(db, server: server)
                return nil
            }
            guard version == Self.format else {
                throw Problem(problem: .unreadable("format \(version), this library reads \(Self.format)"))
            }
            var meta: [String: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT key, value FROM replica_meta") { meta[row["key"]] = row["value"] }
            guard meta["server"] == server.absoluteString else {
                throw Problem(problem: .otherServer(meta["server"] ?? "?"))
            }
            let decoder = FanoutJSON.decoder()
            do {
                let pending = try String.fetchAll(db, sql: "SELECT write FROM replica_pending ORDER BY position").map {
                    try decoder.decode(PendingWrite.self, from: Data($0.utf8))
                }
                guard let seqText = meta["seq"] else {
                    return pending.isEmpty
                        ? nil : Saved(carts: [:], covered: nil, seq: nil, databaseID: nil, savedAt: Date(), pending: pending)
                }
                guard let seq = Int64(seqText), let coveredText = meta["covered"], let savedAtText = meta["savedAt"],
                    let savedAt = Double(savedAtText)
                else { throw Problem(problem: .unreadable("its description of the replica is incomplete")) }
                let covered: CartSelection =
                    coveredText == "*" ? .all : .carts(Set(try decoder.decode([String].self, from: Data(coveredText.utf8))))
                var carts: [String: Cart] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT cart FROM replica_carts") {
                    let text: String = row["cart"]
                    let cart = try decoder.decode(Cart.self, from: Data(text.utf8))
                    carts[cart.id] = cart
                }
                return Saved(
                    carts: carts, covered: covered, seq: seq, databaseID: meta["databaseID"],
                    savedAt: Date(timeIntervalSince1970: savedAt), pending: pending)
            } catch let problem as Problem {
                throw problem
            } catch {
                throw Problem(problem: .unreadable("\(error)"))
            }
        }
    }

    private static func create(_ db: Database, server: URL) throws {
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS replica_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS replica_carts(id TEXT PRIMARY KEY, cart TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS replica_pending(position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, write TEXT NOT NULL);
                """)
        try db.execute(sql: "INSERT OR REPLACE INTO replica_meta(key, value) VALUES ('server', ?)", arguments: [server.absoluteString])
        try db.execute(sql: "PRAGMA user_version = \(format)")
    }

    /// Empties the file and makes it this server's.
    private func reset(server: URL) throws {
        try queue.write { db in
            for table in ["replica_meta", "replica_carts", "replica_pending"] {
                try db.execute(sql: "DROP TABLE IF EXISTS \(table)")
            }
            try db.execute(sql: "PRAGMA user_version = 0")
            try Self.create(db, server: server)
        }
    }

    /// Saves the whole replica (after a snapshot, or when the carts followed changed).
    func saveAll(carts: [String: Cart], covered: CartSelection, seq: Int64, databaseID: String?) {
        save { db in
            try db.execute(sql: "DELETE FROM replica_carts")
            for cart in carts.values {
                try db.execute(
                    sql: "INSERT INTO replica_carts(id, cart) VALUES (?, ?)", arguments: [cart.id, try Self.json(cart)])
            }
            let coveredText = try covered.subscription.map { try Self.json($0) } ?? "*"
            try Self.setMeta(db, ["covered": coveredText, "databaseID": databaseID])
            try Self.setSeq(db, seq)
        }
    }

    /// Saves one cart and the seq (after an event).
    func save(_ cart: Cart?, seq: Int64) {
        save { db in
            if let cart {
                try db.execute(
                    sql: "INSERT OR REPLACE INTO replica_carts(id, cart) VALUES (?, ?)", arguments: [cart.id, try Self.json(cart)])
            }
            try Self.setSeq(db, seq)
        }
    }

    /// Queues a write taken, in order with the replica's other changes (under its lock), to be
    /// synced; `synced(through:)` with the number returned waits for it.
    func addPending(_ write: PendingWrite) -> Int {
        // Encoded in the batch, as every change: a failure fails the file (`failure`), never a
        // row the next start could not read (which would discard the other pending writes).
        enqueue(sync: true) { db in
            try db.execute(sql: "INSERT INTO replica_pending(id, write) VALUES (?, ?)", arguments: [write.id, try Self.json(write)])
        }
    }

    /// Returns once every change queued so far is written.
    package func flush() async {
        await synced(through: backlog.withLockedValue { $0.queued })
    }

    /// Returns once the changes up to `number` are written (and synced, for a write taken): the
    /// caller's thread is free meanwhile.
    func synced(through number: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = backlog.withLockedValue { backlog in
                if backlog.written >= number || failure != nil { return true }
                backlog.waiters.append((number, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    func removePending(_ id: String) {
        save { db in try db.execute(sql: "DELETE FROM replica_pending WHERE id = ?", arguments: [id]) }
    }

    /// Forgets the replica but keeps the pending writes (the carts are read anew).
    func forgetCarts() {
        save { db in
            try db.execute(sql: "DELETE FROM replica_carts")
            try db.execute(sql: "DELETE FROM replica_meta WHERE key IN ('seq', 'covered', 'databaseID')")
        }
    }

    private func save(_ body: @escaping (Database) throws -> Void) {
        enqueue(sync: false, body)
    }

    /// Queues `body` and returns its number. Starts the file's thread on the backlog if it is
    /// idle; past `maxBacklog` changes, writes them here (the caller waits on the disk, as
    /// before the file had a thread: the backlog stays bounded).
    @discardableResult
    private func enqueue(sync: Bool, _ body: @escaping (Database) throws -> Void) -> Int {
        let (number, start, inline) = backlog.withLockedValue { backlog -> (Int, Bool, Bool) in
            backlog.changes.append(body)
            backlog.queued += 1
            if sync { backlog.syncWanted = true }
            let start = !backlog.draining
            backlog.draining = true
            return (backlog.queued, start, backlog.changes.count > Self.maxBacklog)
        }
        if inline {
            drain()
        } else if start {
            writer.async { self.drainAll() }
        }
        return number
    }

    /// Writes the backlog until it is empty, then lets the next change start the thread again.
    private func drainAll() {
        while drain() {}
    }

    /// Writes what is queued now in one transaction (synced when someone waits for it), and
    /// resumes those waiting. Returns whether more came meanwhile.
    @discardableResult
    private func drain() -> Bool {
        writing.lock()
        defer { writing.unlock() }
        let (changes, upTo, sync) = backlog.withLockedValue { backlog in
            defer { (backlog.changes, backlog.syncWanted) = ([], false) }
            return (backlog.changes, backlog.queued, backlog.syncWanted)
        }
        if !changes.isEmpty, failure == nil {
            do {
                try queue.writeWithoutTransaction { db in
                    if sync { try db.execute(sql: "PRAGMA synchronous = FULL") }
                    defer { if sync { try? db.execute(sql: "PRAGMA synchronous = NORMAL") } }
                    try db.inTransaction {
                        for change in changes { try change(db) }
                        return .commit
                    }
                }
            } catch {
                failed.withLockedValue { $0 = $0 ?? "\(error)" }
            }
        }
        let (ready, more) = backlog.withLockedValue { backlog in
            backlog.written = max(backlog.written, upTo)
            let written = backlog.written
            let ready = backlog.waiters.filter { $0.upTo <= written }.map(\.continuation)
            backlog.waiters.removeAll { $0.upTo <= written }
            if backlog.changes.isEmpty { backlog.draining = false }
            return (ready, !backlog.changes.isEmpty)
        }
        for waiter in ready { waiter.resume() }
        return more
    }

    private static func setSeq(_ db: Database, _ seq: Int64) throws {
        try setMeta(db, ["seq": "\(seq)", "savedAt": "\(Date().timeIntervalSince1970)"])
    }

    private static func setMeta(_ db: Database, _ values: [String: String?]) throws {
        for (key, value) in values {
            if let value {
                try db.execute(sql: "INSERT OR REPLACE INTO replica_meta(key, value) VALUES (?, ?)", arguments: [key, value])
            } else {
                try db.execute(sql: "DELETE FROM replica_meta WHERE key = ?", arguments: [key])
            }
        }
    }

    private static func json(_ value: some Encodable) throws -> String {
        String(decoding: try FanoutJSON.encoder().encode(value), as: UTF8.self)
    }
}

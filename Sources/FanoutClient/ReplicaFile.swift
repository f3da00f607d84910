import FanoutProtocol
import Foundation
import GRDB

/// What a `RemoteCartStore` made of its cache file when it opened.
public enum ReplicaCacheState: Sendable, Hashable {
    /// No cache file was given: the replica lives in memory only.
    case none
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
/// Every change of the replica is saved before observers are told of it; a write made through
/// the store is saved before the call returns, so a process killed at any moment restarts with
/// what its observers were last told and every write it took.
final class ReplicaFile: @unchecked Sendable {  // GRDB's queue serialises; the flag is behind the replica's lock.
    private let queue: DatabaseQueue
    /// Set when a save failed: the file is left alone from then on.
    private(set) var failure: String?

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

    /// Saves a write taken, synced before the call that took it returns: it survives a power cut.
    func addPending(_ write: PendingWrite) {
        guard failure == nil else { return }
        do {
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                defer { try? db.execute(sql: "PRAGMA synchronous = NORMAL") }
                try db.inTransaction {
                    try db.execute(
                        sql: "INSERT INTO replica_pending(id, write) VALUES (?, ?)", arguments: [write.id, try Self.json(write)])
                    return .commit
                }
            }
        } catch {
            failure = "\(error)"
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

    private func save(_ body: (Database) throws -> Void) {
        guard failure == nil else { return }
        do {
            try queue.write(body)
        } catch {
            failure = "\(error)"
        }
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

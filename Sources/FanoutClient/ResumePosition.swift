import Foundation
import NIOConcurrencyHelpers

/// Where a subscriber keeps the seq it has handled, to resume after it: across disconnects
/// (`MemoryResumePosition`) or across restarts of the program too (`FileResumePosition`).
///
/// A seq means something only on the database it came from: the position keeps that
/// database's identity (`databaseId`) beside it, and a server that says another one (a reset
/// database, a new one, another server's) makes it start over (`use(databaseID:)`).
public protocol ResumePosition: Sendable {
    /// The last seq handled, nil before any.
    var last: Int64? { get }
    /// Records `seq` as handled.
    func advance(to seq: Int64) throws
    /// The identity of the database `last` is of; nil while unknown.
    var databaseID: String? { get }
    /// Says which database the server serves (its welcome's `databaseId`). The same one as
    /// kept, or none kept yet: kept, and true. Another one: the seq handled is forgotten (it
    /// counts another database's changes), the new identity kept, and false.
    func use(databaseID: String) throws -> Bool
}

extension ResumePosition {
    /// A position that keeps no identity: nothing to compare, every database taken at its word.
    public var databaseID: String? { nil }

    public func use(databaseID: String) throws -> Bool { true }
}

/// A resume position in memory: survives disconnects, not the process.
public final class MemoryResumePosition: ResumePosition {
    private let state: NIOLockedValueBox<(seq: Int64?, databaseID: String?)>

    public init(_ seq: Int64? = nil, databaseID: String? = nil) {
        state = NIOLockedValueBox((seq, databaseID))
    }

    public var last: Int64? { state.withLockedValue { $0.seq } }

    public var databaseID: String? { state.withLockedValue { $0.databaseID } }

    public func advance(to seq: Int64) {
        state.withLockedValue { $0.seq = seq }
    }

    public func use(databaseID: String) -> Bool {
        state.withLockedValue { state in
            defer { state.databaseID = databaseID }
            guard let kept = state.databaseID, kept != databaseID else { return true }
            state.seq = nil
            return false
        }
    }
}

/// A resume position kept in a file, written whole and renamed over the old one at each
/// change, so a crash leaves the old value or the new one: the seq as text, and the database's
/// identity after it once known (`42 6f1c2a4e-…`). A file of a seq alone (an older version's)
/// is read, and its identity taken from the first server it meets.
public final class FileResumePosition: ResumePosition {
    public let file: URL
    private let state: NIOLockedValueBox<(seq: Int64?, databaseID: String?)>

    /// Reads the file if it exists.
    ///
    /// - Throws: `RemoteStoreError.unexpectedAnswer` when the file holds something else than a
    ///   seq and an identity (it is left as it is).
    public init(file: URL) throws {
        self.file = file
        var start: (seq: Int64?, databaseID: String?) = (nil, nil)
        if FileManager.default.fileExists(atPath: file.path) {
            let text = try String(contentsOf: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            let fields = text.split(separator: " ", omittingEmptySubsequences: true)
            guard (1...2).contains(fields.count), let saved = Int64(fields[0]), saved >= 0,
                fields.count == 1 || UUID(uuidString: String(fields[1])) != nil
            else {
                throw RemoteStoreError.unexpectedAnswer(
                    "\(file.path) does not hold a seq and a database's identity (found \"\(text.prefix(60))\")")
            }
            start = (saved, fields.count == 2 ? String(fields[1]) : nil)
        }
        state = NIOLockedValueBox(start)
    }

    public var last: Int64? { state.withLockedValue { $0.seq } }

    public var databaseID: String? { state.withLockedValue { $0.databaseID } }

    public func advance(to value: Int64) throws {
        try state.withLockedValue { state in
            guard state.seq != value else { return }
            try save(seq: value, databaseID: state.databaseID)
            state.seq = value
        }
    }

    public func use(databaseID: String) throws -> Bool {
        try state.withLockedValue { state in
            guard state.databaseID != databaseID else { return true }
            let same = state.databaseID == nil
            let seq = same ? state.seq : nil
            try save(seq: seq, databaseID: databaseID)
            state = (seq, databaseID)
            return same
        }
    }

    private func save(seq: Int64?, databaseID: String?) throws {
        guard let seq else {
            // Nothing handled on this database yet: no seq to resume after.
            try? FileManager.default.removeItem(at: file)
            return
        }
        try Data("\(seq)\(databaseID.map { " \($0)" } ?? "")\n".utf8).write(to: file, options: .atomic)
    }
}

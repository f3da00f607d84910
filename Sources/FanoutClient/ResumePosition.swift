import Foundation
import NIOConcurrencyHelpers

/// Where a subscriber keeps the seq it has handled, to resume after it: across disconnects
/// (`MemoryResumePosition`) or across restarts of the program too (`FileResumePosition`).
public protocol ResumePosition: Sendable {
    /// The last seq handled, nil before any.
    var last: Int64? { get }
    /// Records `seq` as handled.
    func advance(to seq: Int64) throws
}

/// A resume position in memory: survives disconnects, not the process.
public final class MemoryResumePosition: ResumePosition {
    private let seq: NIOLockedValueBox<Int64?>

    public init(_ seq: Int64? = nil) {
        self.seq = NIOLockedValueBox(seq)
    }

    public var last: Int64? { seq.withLockedValue { $0 } }

    public func advance(to seq: Int64) {
        self.seq.withLockedValue { $0 = seq }
    }
}

/// A resume position kept in a file (the seq as text), written whole and renamed over the old
/// one at each advance, so a crash leaves the old value or the new one.
public final class FileResumePosition: ResumePosition {
    public let file: URL
    private let seq: NIOLockedValueBox<Int64?>

    /// Reads the file if it exists.
    ///
    /// - Throws: `RemoteStoreError.unexpectedAnswer` when the file holds something else than a
    ///   seq (it is left as it is).
    public init(file: URL) throws {
        self.file = file
        var start: Int64?
        if FileManager.default.fileExists(atPath: file.path) {
            let text = try String(contentsOf: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let saved = Int64(text), saved >= 0 else {
                throw RemoteStoreError.unexpectedAnswer("\(file.path) does not hold a seq (found \"\(text.prefix(40))\")")
            }
            start = saved
        }
        seq = NIOLockedValueBox(start)
    }

    public var last: Int64? { seq.withLockedValue { $0 } }

    public func advance(to value: Int64) throws {
        guard seq.withLockedValue({ $0 }) != value else { return }
        try Data("\(value)\n".utf8).write(to: file, options: .atomic)
        seq.withLockedValue { $0 = value }
    }
}

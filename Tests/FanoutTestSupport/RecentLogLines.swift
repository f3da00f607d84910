import Foundation
import Logging
import NIOConcurrencyHelpers

/// The last lines a server run in the test process logged, for a failing test to print (what
/// the process's standard error is for a server process), or to search.
public final class RecentLogLines: Sendable {
    /// The most lines kept; past it the older half is dropped.
    public let capacity: Int
    private let lines = NIOLockedValueBox<[String]>([])

    public init(capacity: Int = 500) { self.capacity = capacity }

    /// A logger writing here, at `level` (the server's default is `info`).
    public func logger(label: String = "fanout", level: Logger.Level = .info) -> Logger {
        var logger = Logger(label: label) { [self] label in Handler(label: label, lines: self) }
        logger.logLevel = level
        return logger
    }

    /// The lines kept, oldest first.
    public var all: [String] { lines.withLockedValue { $0 } }

    /// The lines kept, oldest first, one a line.
    public var text: String { all.joined(separator: "\n") }

    fileprivate func append(_ line: String) {
        lines.withLockedValue { lines in
            if lines.count == capacity { lines.removeFirst(capacity / 2) }
            lines.append(line)
        }
    }

    private struct Handler: LogHandler {
        let label: String
        let lines: RecentLogLines
        var logLevel: Logger.Level = .info
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { _, new in new }
            let pretty = all.sorted { $0.key < $1.key }.map { " \($0)=\($1)" }.joined()
            lines.append("\(Date()) \(event.level) \(label):\(pretty) \(event.message)\(event.error.map { " (\($0))" } ?? "")")
        }
    }
}

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writes handed from one bench process to others, for subscribers spread over several
/// processes (a process may hold at most 20 000 open files): the writing process saves its
/// acknowledged writes to a file, the listening ones read them and measure their receipts
/// against them.
///
/// Instants cross processes as the machine's monotonic clock (`CLOCK_MONOTONIC`, one clock for
/// every process), mapped to and from this process's `ContinuousClock` by one reading of both.
enum SharedWrites {
    /// This process's `ContinuousClock` instant and the monotonic clock's nanoseconds, read
    /// back to back.
    private static let anchor: (instant: ContinuousClock.Instant, nanoseconds: Int64) = {
        var now = timespec()
        let instant = ContinuousClock.now
        clock_gettime(CLOCK_MONOTONIC, &now)
        return (instant, Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec))
    }()

    private static func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - anchor.instant).components
        return anchor.nanoseconds + seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    private static func instant(_ nanoseconds: Int64) -> ContinuousClock.Instant {
        anchor.instant + .nanoseconds(nanoseconds - anchor.nanoseconds)
    }

    /// Saves `writes` to `path`, whole or not at all (a listener never reads half a file).
    static func save(_ writes: [Write], to path: String) throws {
        let lines = writes.map { "\($0.seq) \(nanoseconds($0.sentAt))\n" }.joined()
        try Data(lines.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    /// The writes saved at `path`, once the file is there; nil if it is not within `timeout`.
    static func wait(for path: String, timeout: Duration) async throws -> [Write]? {
        _ = anchor
        let deadline = ContinuousClock.now + timeout
        while !FileManager.default.fileExists(atPath: path) {
            guard ContinuousClock.now < deadline else { return nil }
            try await Task.sleep(for: .milliseconds(20))
        }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        return try text.split(separator: "\n").map { line in
            let fields = line.split(separator: " ")
            guard fields.count == 2, let seq = Int64(fields[0]), let sent = Int64(fields[1]) else {
                throw BenchFailure("\(path): not a line of writes: \(line)")
            }
            return Write(seq: seq, sentAt: instant(sent))
        }
    }

    /// Waits until every one of `paths` exists; false if one is missing after `timeout`.
    static func awaitFiles(_ paths: [String], timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !paths.allSatisfy({ FileManager.default.fileExists(atPath: $0) }) {
            guard ContinuousClock.now < deadline else { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }
}

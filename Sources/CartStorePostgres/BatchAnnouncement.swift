import CartStore
import Foundation

/// What a batch's notification says: the seq it follows and the seq it ends at, and, when they
/// fit in a notification (`maxBytes`), its events. A follower whose log is delivered through
/// `previous` delivers them from here, without reading the log; any other follower, or any
/// payload without events (or not of this form), reads the log as before. The events are the
/// log's rows as the same transaction wrote them, and PostgreSQL delivers a notification only
/// once its transaction has committed.
///
/// The form, text: a line `previous latest`, then a line per event, its fields separated by
/// tabs: seq, cart id, version, committed at (ms), the change's JSON, and, for an event made
/// with an idempotency key, the key (ids and keys have no tabs, and JSON written by
/// `JSONBytes` no raw tab or newline). A line without the key is an event without one, as
/// older servers wrote every line; an older server reads a line with a key as not of this
/// form, and reads the log instead.
///
/// Only the first line is read when the payload arrives: a follower that has the batch already
/// (its own, delivered by the committer) or is not at `previous` decodes no event (`events()`).
struct BatchAnnouncement {
    let previous: Int64?
    let latest: Int64
    /// The payload, and where its event lines start (UTF-8 offset; its length when none).
    private let payload: String
    private let bodyStart: Int

    /// A notification's payload is at most 8 000 bytes; this leaves room.
    static let maxBytes = 7_900

    /// The payload of a batch's notification.
    static func payload(previous: Int64, latest: Int64, events: [CartEvent], changes: [String]) -> String {
        let head = "\(previous) \(latest)"
        var payload = head
        for (event, change) in zip(events, changes) {
            payload += "\n\(event.seq)\t\(event.cartID)\t\(event.version)\t\(event.committedAt.millisecondsSince1970)\t\(change)"
            if let key = event.idempotencyKey { payload += "\t\(key)" }
            if payload.utf8.count > maxBytes { return head }
        }
        return payload
    }

    /// Reads a payload's first line: this form, or a bare seq (an older server's doorbell).
    /// Nil for anything else, which is a doorbell too.
    init?(_ payload: String) {
        var payload = payload
        let head: (previous: Int64?, latest: Int64, bodyStart: Int)? = payload.withUTF8 { bytes in
            let newline = bytes.firstIndex(of: UInt8(ascii: "\n"))
            let fields = bytes[..<(newline ?? bytes.endIndex)].split(separator: UInt8(ascii: " "))
            let bodyStart = newline.map { $0 + 1 } ?? bytes.count
            switch fields.count {
            case 1:
                return Self.int64(fields[0]).map { (nil, $0, bodyStart) }
            case 2:
                guard let previous = Self.int64(fields[0]), let latest = Self.int64(fields[1]) else { return nil }
                return (previous, latest, bodyStart)
            default:
                return nil
            }
        }
        guard let head else { return nil }
        self.payload = payload
        (previous, latest, bodyStart) = head
    }

    /// The batch's events, decoded now: nil unless the payload carries every one of them, the
    /// seqs after `previous` in order, each well formed (else the log is read instead). Read as
    /// bytes: the fields are split at tab and newline bytes, which no field contains. The
    /// head's span is not trusted for anything but the count (a payload could claim any).
    func events() -> [CartEvent]? {
        guard let previous, latest > previous, bodyStart < payload.utf8.count else { return nil }
        var payload = payload
        return payload.withUTF8 { bytes -> [CartEvent]? in
            var events: [CartEvent] = []
            for line in bytes[bodyStart...].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
                let fields = line.split(separator: UInt8(ascii: "\t"), maxSplits: 5, omittingEmptySubsequences: false)
                guard fields.count == 5 || fields.count == 6, let seq = Self.int64(fields[0]),
                    seq == Self.sum(previous, 1 + events.count),
                    let version = Self.int64(fields[2]), let committedAt = Self.int64(fields[3]),
                    let event = try? CartEvent.stored(
                        seq: seq, cartID: Self.string(fields[1]), change: Self.string(fields[4]), version: version,
                        committedAt: committedAt, idempotencyKey: fields.count == 6 ? Self.string(fields[5]) : nil)
                else { return nil }
                events.append(event)
            }
            return Self.sum(previous, events.count) == latest ? events : nil
        }
    }

    /// `seq + count`, nil past `Int64.max`: the head's seqs are read from the payload.
    private static func sum(_ seq: Int64, _ count: Int) -> Int64? {
        let (sum, overflow) = seq.addingReportingOverflow(Int64(count))
        return overflow ? nil : sum
    }

    private static func string(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes), as: UTF8.self)
    }

    /// A decimal integer, as `Int64(_:)` reads it.
    private static func int64(_ bytes: Slice<UnsafeBufferPointer<UInt8>>) -> Int64? {
        Int64(string(bytes))
    }
}

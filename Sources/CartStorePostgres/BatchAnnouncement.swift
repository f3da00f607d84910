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
    /// The event lines, undecoded.
    private let body: Substring

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
        let newline = payload.firstIndex(of: "\n")
        let head = payload[..<(newline ?? payload.endIndex)].split(separator: " ")
        body = newline.map { payload[payload.index(after: $0)...] } ?? ""
        switch head.count {
        case 1:
            guard let latest = Int64(head[0]) else { return nil }
            previous = nil
            self.latest = latest
        case 2:
            guard let previous = Int64(head[0]), let latest = Int64(head[1]) else { return nil }
            self.previous = previous
            self.latest = latest
        default:
            return nil
        }
    }

    /// The batch's events, decoded now: nil unless the payload carries every one of them, the
    /// seqs after `previous` in order, each well formed (else the log is read instead).
    func events() -> [CartEvent]? {
        guard let previous, latest > previous, !body.isEmpty else { return nil }
        var events: [CartEvent] = []
        for line in body.split(separator: "\n", omittingEmptySubsequences: false) {
            let fields = line.split(separator: "\t", maxSplits: 5, omittingEmptySubsequences: false)
            guard fields.count == 5 || fields.count == 6, let seq = Int64(fields[0]), seq == previous + 1 + Int64(events.count),
                let version = Int64(fields[2]), let committedAt = Int64(fields[3]),
                let event = try? CartEvent.stored(
                    seq: seq, cartID: String(fields[1]), change: String(fields[4]), version: version, committedAt: committedAt,
                    idempotencyKey: fields.count == 6 ? String(fields[5]) : nil)
            else { return nil }
            events.append(event)
        }
        return Int64(events.count) == latest - previous ? events : nil
    }
}

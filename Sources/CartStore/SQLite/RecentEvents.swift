import DequeModule
import NIOConcurrencyHelpers

/// The newest committed events of a SQLite store, kept by its writer, so that a page of the
/// log's tail (what pollers, long-polls and subscribers catching up ask for) is answered from
/// memory: no read transaction, and no decoding of the stored changes, which were most of
/// such a read's cost.
///
/// Only the writer changes it, and only one writer commits to a file (`DatabaseFileLock`):
/// after a batch commits, and before its callers are answered, the writer appends the batch's
/// events, so a caller that has its seq finds its event here. It holds a run of seqs without a
/// gap ending at the newest committed, at most `capacity` of them; when full, appending forgets
/// the oldest, so the writer never waits for room. A prune forgets them all (the log may then
/// lack some of them). It knows nothing committed before this process opened the file, or
/// before the last prune: a `since` older than what it holds is read from the log.
final class RecentEvents: Sendable {
    /// At most this many events are kept (about 300 bytes each).
    let capacity: Int
    private let events: NIOLockedValueBox<Deque<CartEvent>>

    init(capacity: Int = 1_024) {
        self.capacity = max(1, capacity)
        events = NIOLockedValueBox(Deque(minimumCapacity: min(self.capacity, 1_024)))
    }

    /// Appends the next committed event; forgets the oldest when full. An event that does not
    /// follow the newest held starts the run again at it, so that no page skips a seq.
    func append(_ event: CartEvent) {
        events.withLockedValue { events in
            if let newest = events.last, newest.seq + 1 != event.seq { events.removeAll(keepingCapacity: true) }
            if events.count == capacity { events.removeFirst() }
            events.append(event)
        }
    }

    /// Forgets every event: the log changed other than by a commit (a prune).
    func forgetAll() {
        events.withLockedValue { $0.removeAll(keepingCapacity: true) }
    }

    /// The newest seq committed, when any was committed since the file was opened or pruned.
    var newestSeq: Int64? {
        events.withLockedValue { $0.last?.seq }
    }

    /// The events after `seq` (of `carts` only, when given), at most `limit`, as the log would
    /// answer; nil when some event after `seq` is not held (then only the log can answer), or
    /// `seq` is past the newest held (the log says whether it is ahead of the log).
    func page(after seq: Int64, limit: Int, carts: Set<String>?) -> EventLogRead? {
        events.withLockedValue { events in
            guard let oldest = events.first?.seq, let newest = events.last?.seq, seq >= oldest - 1, seq <= newest else {
                return nil
            }
            var page: [CartEvent] = []
            var index = Int(seq - oldest + 1)
            while index < events.count, page.count < limit {
                let event = events[index]
                if carts?.contains(event.cartID) ?? true { page.append(event) }
                index += 1
            }
            return .events(page, latestSeq: newest)
        }
    }
}

import DequeModule
import NIOConcurrencyHelpers
import NIOCore

/// The most recent events, encoded for the wire once, that live subscribers read from.
///
/// The store's writer thread appends each committed event; each event loop reads what its
/// subscribers have not yet been sent (see `LoopFanout`). It holds at most `capacity` events:
/// when full, appending forgets the oldest, and a subscriber still behind it is too slow
/// (it resumes from the durable log with `since`). So the writer never waits for a reader,
/// and memory stays bounded however slow they are.
final class LiveRing: Sendable {
    struct Item: Sendable {
        let seq: Int64
        let cartID: String
        /// A complete WebSocket text frame, shared by every subscriber.
        let frame: ByteBuffer
    }

    let capacity: Int
    private let items: NIOLockedValueBox<Deque<Item>>

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        items = NIOLockedValueBox(Deque(minimumCapacity: min(self.capacity, 4_096)))
    }

    /// Appends the next event; seqs must arrive in order (the store delivers them so).
    func append(_ item: Item) {
        items.withLockedValue { items in
            if items.count == capacity { items.removeFirst() }
            items.append(item)
        }
    }

    /// The events after `seq`, oldest first, and whether any event after `seq` was already
    /// forgotten (the reader fell more than `capacity` events behind).
    func items(after seq: Int64) -> (items: [Item], missed: Bool) {
        items.withLockedValue { items in
            guard let first = items.first else { return ([], false) }
            if seq + 1 < first.seq { return (Array(items), true) }
            // Seqs ascend: find the first one after `seq`, from the newest end, where readers
            // that keep up look.
            var start = items.count
            while start > 0, items[start - 1].seq > seq { start -= 1 }
            return (Array(items[start...]), false)
        }
    }
}

import DequeModule

/// Something with a place in the log: its seq.
package protocol Sequenced {
    var seq: Int64 { get }
}

/// The newest part of the log in memory: a run of elements whose seqs follow one another
/// without a gap, the newest last, at most `capacity` of them. The SQLite writer's recent events
/// (`RecentEvents`) and the server's live ring are one each.
///
/// Appending never waits for room: when full, the oldest is forgotten. An element whose seq
/// does not follow the newest starts the run again at it, so that no read of the run skips a
/// seq: what came before the gap is read from the log instead.
package struct SeqRun<Element: Sequenced> {
    /// At most this many elements are kept.
    package let capacity: Int
    private var elements: Deque<Element>

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
        elements = Deque(minimumCapacity: min(self.capacity, 4_096))
    }

    /// Appends `element` (see the type: a gap starts the run again; full, the oldest goes).
    package mutating func append(_ element: Element) {
        if let newest = elements.last, newest.seq + 1 != element.seq { elements.removeAll(keepingCapacity: true) }
        if elements.count == capacity { elements.removeFirst() }
        elements.append(element)
    }

    package mutating func removeAll() {
        elements.removeAll(keepingCapacity: true)
    }

    package var oldestSeq: Int64? { elements.first?.seq }
    package var newestSeq: Int64? { elements.last?.seq }
    package var count: Int { elements.count }

    /// Whether the run holds every element after `seq` up to the newest: `seq` is at least the
    /// one before the oldest held, and not past the newest. Any `Int64` may be asked (a
    /// client's `since` of `Int64.max` must not trap).
    package func holdsEverything(after seq: Int64) -> Bool {
        // `oldest - 1`, not `seq + 1`: `seq` is the caller's number, `oldest` at least 1.
        guard let oldest = oldestSeq, let newest = newestSeq else { return false }
        return seq >= oldest - 1 && seq <= newest
    }

    /// The elements after `seq`, oldest first: all of them when `seq` is before the run, none
    /// when it is at or past the newest. The run has no gap, so the first is found by its
    /// distance from the oldest.
    package func elements(after seq: Int64) -> Deque<Element>.SubSequence {
        guard let oldest = oldestSeq, seq < newestSeq ?? oldest else { return elements[elements.endIndex...] }
        guard seq >= oldest else { return elements[...] }
        return elements[Int(seq - oldest + 1)...]
    }
}

extension SeqRun: Sendable where Element: Sendable {}

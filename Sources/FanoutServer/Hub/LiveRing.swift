import CartStore
import FanoutConcurrency
import NIOConcurrencyHelpers

/// The most recent events, as shared bytes: the one buffer between the store and the live
/// subscribers.
///
/// Whoever delivers the store's commits appends every committed event, in seq order (SQLite's
/// writer after each batch; on PostgreSQL the store's follower, for every server's), so the ring always
/// holds a contiguous run of seqs ending at the newest. Each event loop reads from it what its
/// subscribers have not yet been sent (see `LoopFanout`). It holds at most `capacity` events:
/// when full, appending forgets the oldest, so the writer never waits for a reader. A subscriber
/// whose cursor is older than what the ring still holds has fallen out of it: it is ended as too
/// slow, and resumes from the durable log with `since`.
final class LiveRing: Sendable {
    private struct State {
        var run: SeqRun<EventBytes>
        /// The seq the next append will carry: everything before it was committed.
        var nextSeq: Int64
    }
    private let state: NIOLockedValueBox<State>

    /// - Parameter latestSeq: the newest seq committed before the ring starts.
    init(capacity: Int, latestSeq: Int64) {
        state = NIOLockedValueBox(State(run: SeqRun(capacity: capacity), nextSeq: latestSeq + 1))
    }

    /// Appends the next event (the store delivers them in seq order); forgets the oldest when full.
    ///
    /// Returns false, and keeps nothing, for an event before `nextSeq`: one committed before the
    /// ring started, delivered to the hub while it was being added to the store's observers. An
    /// event after `nextSeq` means the ones between never reached the ring (the same moment,
    /// the other way round): the ring starts again at it, so a reader whose cursor is before the
    /// missing ones has fallen out and resumes from the log rather than skip them.
    @discardableResult
    func append(_ item: EventBytes) -> Bool {
        state.withLockedValue { state in
            guard item.seq >= state.nextSeq else { return false }
            state.run.append(item)
            state.nextSeq = item.seq + 1
            return true
        }
    }

    /// The newest seq appended (or, before any, the newest committed when the ring started).
    var newestSeq: Int64 {
        state.withLockedValue { $0.nextSeq - 1 }
    }

    /// The oldest seq the ring can still give: a cursor before `oldestSeq - 1` has fallen out.
    var oldestSeq: Int64 {
        state.withLockedValue { $0.run.oldestSeq ?? $0.nextSeq }
    }

    /// Whether the ring alone can serve a reader at `cursor`: it holds every event after it
    /// that was appended so far, and the cursor is not past the newest appended (a cursor past
    /// it is ahead of the log, or of the ring for an instant: only the log can tell).
    func covers(_ cursor: Int64) -> Bool {
        state.withLockedValue { state in
            state.run.count == 0 ? cursor == state.nextSeq - 1 : state.run.holdsEverything(after: cursor)
        }
    }

    /// The events after `seq` that the ring holds, oldest first: a copy of the references only.
    func items(after seq: Int64) -> [EventBytes] {
        state.withLockedValue { Array($0.run.elements(after: seq)) }
    }
}

extension EventBytes: Sequenced {}

import FanoutConcurrency
import NIOConcurrencyHelpers

/// The newest committed events of a SQLite store, kept by its writer, so that a page of the
/// log's tail (what pollers, long-polls and subscribers catching up ask for) is answered from
/// memory: no read transaction, and no decoding of the stored changes, which were most of
/// such a read's cost.
///
/// Only the writer changes it, and only one writer commits to a file (`DatabaseFileLock`;
/// changing the log by other means while a store has it open is not supported). It holds a
/// run of seqs without a gap ending at the newest committed, at most `capacity` of them; when
/// full, appending forgets the oldest, so the writer never waits for room. It knows nothing
/// committed before this process opened the file, or before the last prune (which forgets
/// everything, as the log may then lack some of it): a `since` older than what it holds is
/// read from the log.
///
/// It never answers behind the file: readers see a batch in the file from the moment its
/// COMMIT ends, and the writer appends the batch's events only after that. So the writer says
/// `willCommit()` before the COMMIT, and until the batch's events are appended (or the COMMIT
/// failed) every question here answers nil and the log is read. An answer from here is the log
/// as it stood before any commit still in flight: what a read of the file would have said at
/// that moment. A caller whose commit has returned finds its event: the append comes before
/// callers are answered.
final class RecentEvents: Sendable {
    /// At most this many events are kept (about 300 bytes each).
    var capacity: Int { state.withLockedValue { $0.run.capacity } }
    private struct State {
        var run: SeqRun<CartEvent>
        /// Between `willCommit()` and `didCommit(_:)` / `commitFailed()`.
        var committing = false
    }
    private let state: NIOLockedValueBox<State>

    init(capacity: Int = 1_024) {
        state = NIOLockedValueBox(State(run: SeqRun(capacity: capacity)))
    }

    /// The writer is about to commit a batch: answer nothing until it says how that went.
    func willCommit() {
        state.withLockedValue { $0.committing = true }
    }

    /// The batch committed these events, in seq order: append them (forgetting the oldest when
    /// full; an event that does not follow the newest held starts the run again at it, so that
    /// no page skips a seq), and answer again.
    func didCommit(_ committed: [CartEvent]) {
        state.withLockedValue { state in
            for event in committed { state.run.append(event) }
            state.committing = false
        }
    }

    /// The batch's COMMIT failed: nothing changed in the file.
    func commitFailed() {
        state.withLockedValue { $0.committing = false }
    }

    /// Forgets every event: the log changed other than by a commit (a prune), or is closed.
    func forgetAll() {
        state.withLockedValue { $0.run.removeAll() }
    }

    /// The newest seq committed, when any was committed since the file was opened or pruned
    /// and no commit is in flight.
    var newestSeq: Int64? {
        state.withLockedValue { $0.committing ? nil : $0.run.newestSeq }
    }

    /// The events after `seq` (of `carts` only, when given), at most `limit`, as the log would
    /// answer; nil when some event after `seq` is not held (then only the log can answer), when
    /// `seq` is past the newest held (the log says whether it is ahead of the log), or while a
    /// commit is in flight. The writer waits for the copy: at most `capacity` events are looked
    /// at, microseconds.
    func page(after seq: Int64, limit: Int, carts: Set<String>?) -> EventLogRead? {
        state.withLockedValue { state in
            guard !state.committing, state.run.holdsEverything(after: seq), let newest = state.run.newestSeq else { return nil }
            var page: [CartEvent] = []
            for event in state.run.elements(after: seq) {
                guard page.count < limit else { break }
                if carts?.contains(event.cartID) ?? true { page.append(event) }
            }
            return .events(page, latestSeq: newest)
        }
    }
}

/// An event's place in the log, for the runs of events kept in memory (`SeqRun`).
extension CartEvent: Sequenced {}

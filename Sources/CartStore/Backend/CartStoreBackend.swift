import Foundation

/// What a storage engine does for `CartStore`: keep the carts and the event log, and commit
/// mutations with gap-free seqs. Everything else is the store's and the same for every engine:
/// checking input, deciding a change and asking validators (`CartMutation.plan`), delivering
/// committed events to observers in seq order, and the public API.
///
/// An engine knows nothing of the store that opened it: it hands every committed event, once,
/// in seq order, to the `EventSink` it was started with, before the mutation that committed it
/// returns (a caller that gets its commit back knows its observers have heard of it). Input has
/// been checked by the store (ids, limits, `since`, page sizes) before any of these is called.
package protocol CartStoreBackend: Sendable {
    /// Starts delivering committed events to `sink` (the store calls it once, when it opens).
    func start(delivering sink: EventSink)

    /// Which engine it is, as `CartStore.engineName` says it: `sqlite` or `postgresql`.
    var engineName: String { get }

    /// The database's identity (`CartStore.databaseID`), read once when the engine opened it.
    var databaseID: String { get }
    /// The migrations that opening the database applied, in order (`CartStore.migrationsApplied`).
    var migrationsApplied: [String] { get }
    /// The newest migration of this engine's schema (`CartStore.schemaVersion`).
    var schemaVersion: String { get }

    /// The newest seq delivered to the sink so far, or about to be (nothing committed before it
    /// will be delivered again).
    func deliveredSeq() async throws -> Int64

    /// Commits `mutation` durably, or throws and writes nothing.
    func commit(_ mutation: CartMutation) async throws -> CartCommit

    /// The carts (all, or those of `cartIDs` that exist) and the seq they reflect, read at one
    /// point of the log.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot
    func cart(_ cartID: String) async throws -> Cart?

    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead
    func latestSeq() async throws -> Int64
    func oldestRetainedSeq() async throws -> Int64
    func pruneEvents(keepingLast count: Int) async throws -> Int
    func pruneEvents(committedBefore date: Date) async throws -> Int
    /// Forgets the idempotency keys made before `date`, and all but the newest `count` (by seq).
    func pruneIdempotencyKeys(createdBefore date: Date, keepingNewest count: Int) async throws -> Int
    /// How many idempotency keys are kept now.
    func idempotencyKeyCount() async throws -> Int

    /// Changes queued for the writer and not yet taken into a transaction.
    var waitingChanges: Int { get }

    /// Throws `storeUnavailable` or `storageFull` when a change could not be written now.
    func checkWritable() async throws
    /// How long the batch the writer is on has been under way (`GroupCommit.batchUnderWayFor`).
    var batchUnderWayFor: Duration? { get }
    /// The newest failure of the database, with where it is, for the operator (callers' errors
    /// do not name it); nil when there was none.
    var lastProblem: StoreProblem? { get }
    func close() throws
}

/// A failure of the database as the operator sees it: what, where, and when.
public struct StoreProblem: Sendable, Hashable {
    /// What failed, naming the database.
    public let message: String
    /// When, in milliseconds since 1970.
    public let at: Int64

    package init(message: String, at: Int64) {
        self.message = message
        self.at = at
    }
}

/// Where an engine delivers committed events: the store's observers, through a closure that
/// holds the store weakly. All an engine may do with the store that opened it.
package struct EventSink: Sendable {
    package let deliver: @Sendable (CartEvent) -> Void
}

/// The checks of a read of the log, the same for every engine: a `since` beyond the newest seq
/// is another log (`sinceAhead`), one before what is kept was pruned (`.tooOld`); nil when the
/// events after `since` can be read.
extension EventLogRead {
    package static func refusal(since seq: Int64, latest: Int64, oldestRetained: Int64) throws -> EventLogRead? {
        guard seq <= latest else {
            throw CartStoreError(.sinceAhead, "since \(seq) is ahead of the newest event \(latest): this log is not the one you followed")
        }
        // `oldestRetained - 1`, not `seq + 1`: `seq` is the caller's number.
        guard seq >= oldestRetained - 1 else {
            return .tooOld(oldestRetainedSeq: oldestRetained, latestSeq: latest)
        }
        return nil
    }
}

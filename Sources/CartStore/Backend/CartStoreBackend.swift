import Foundation

/// What a storage engine does for `CartStore`: keep the carts and the event log, and commit
/// mutations with gap-free seqs. Everything else is the store's and the same for every engine:
/// checking input, deciding a change (`CartMutation`), asking validators, delivering committed
/// events to observers in seq order (`CartStore.deliver`), and the public API.
///
/// An engine calls `CartStore.deliver` once per committed event, in seq order, before the
/// mutation that committed it returns: a caller that gets its commit back knows its observers
/// have heard of it. Input has been checked by the store (ids, limits, `since`, page sizes)
/// before any of these is called.
protocol CartStoreBackend: Sendable {
    /// Commits `mutation` durably, or throws and writes nothing.
    func commit(_ mutation: CartMutation, for store: CartStore) async throws -> CartCommit

    /// The carts (all, or those of `cartIDs` that exist) and the seq they reflect, read at one
    /// point of the log.
    func snapshot(of cartIDs: Set<String>?) async throws -> CartSnapshot
    func cart(_ cartID: String) async throws -> Cart?

    func events(after seq: Int64, limit: Int, carts: Set<String>?) async throws -> EventLogRead
    func latestSeq() async throws -> Int64
    func oldestRetainedSeq() async throws -> Int64
    func pruneEvents(keepingLast count: Int) async throws -> Int
    func pruneEvents(committedBefore date: Date) async throws -> Int

    /// Throws `storeUnavailable` or `storageFull` when a change could not be written now.
    func checkWritable() async throws
    func close() throws
}

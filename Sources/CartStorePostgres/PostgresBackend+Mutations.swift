import CartStore
import FanoutConcurrency
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// Mutations on PostgreSQL: queued (`GroupCommit`), committed a batch per transaction under
/// the `event_seq` row lock (`PostgresBatch`), each by a deadline, then delivered by the
/// follower before their callers are answered.
extension PostgresBackend {
    func commit(_ mutation: CartMutation) async throws -> CartCommit {
        try await withCheckedThrowingContinuation { caller in
            do {
                if try commits.enqueue(.init(work: mutation, caller: caller)) {
                    Task(executorPreference: connections.executor) { await self.drainCommits() }
                }
            } catch {
                caller.resume(throwing: error)
            }
        }
    }

    /// Commits waiting mutations a batch per transaction until none is left; after each, the
    /// follower delivers the log through the batch, then its callers are answered. A batch is
    /// taken once its transaction holds the seq row (`PostgresBatch.load`): what waits by then.
    ///
    /// A batch ends by its oldest mutation's deadline (`PostgresConnections.timeout` after it
    /// was queued); a mutation that waited that long behind earlier batches is answered at once,
    /// never started. So however the database fails, every caller hears within the README's
    /// 5 s (4 s for the database, the rest for this process to answer), and the next batch
    /// starts: nothing waits behind a batch that cannot end.
    private func drainCommits() async {
        while true {
            for mutation in commits.takeExpired(queuedBy: .now - connections.timeout) {
                mutation.caller.resume(
                    throwing: CartStoreError(
                        .storeUnavailable,
                        "the database gave no answer within \(connections.timeout) to the changes before this one; nothing was written"
                    ))
            }
            guard let oldest = commits.startBatch() else { return }
            let commits = self.commits
            let started = ContinuousClock.now
            await commitAndAnswer(until: oldest + connections.timeout) { holdingTheRow in
                commits.nextBatch(queuedBy: holdingTheRow ? nil : started) ?? []
            }
        }
    }

    typealias Mutation = GroupCommit<CartMutation>.Mutation

    /// Commits a batch in one transaction, has the follower deliver it, and answers its
    /// callers. The batch is `take`'s, called once: `take(true)` when the transaction holds the
    /// seq row (every mutation waiting then), or `take(false)` when it failed before (those that
    /// waited when the batch started hear of the failure; later ones get a batch of their own,
    /// as a killed session or a restarted database fails one batch, not every change behind it).
    ///
    /// A batch that the database refuses as a whole for its data (a constraint the plans did
    /// not foresee, SQLSTATE class 22 or 23) is committed again one mutation at a time, so that
    /// one bad change does not take the others with it.
    private func commitAndAnswer(
        until deadline: ContinuousClock.Instant, taking take: @escaping @Sendable (_ holdingTheRow: Bool) -> [Mutation]
    ) async {
        let taken = NIOLockedValueBox<[Mutation]?>(nil)
        let takeOnce: @Sendable (Bool) -> [Mutation] = { holdingTheRow in
            taken.withLockedValue { taken in
                if let batch = taken { return batch }
                let batch = take(holdingTheRow)
                taken = batch
                return batch
            }
        }
        let committed: (outcomes: [Result<CartCommit, any Error>], batch: PostgresBatch)
        let committing = NIOLockedValueBox(false)
        do {
            committed = try await commitBatch(until: deadline, committing: committing) { takeOnce(true).map(\.work) }
        } catch {
            let batch = takeOnce(false)
            await follower.ownBatchFailed()
            if batch.count > 1, !committing.withLockedValue({ $0 }), Self.refusedForItsData(error) {
                for mutation in batch { await commitAndAnswer(until: deadline) { _ in [mutation] } }
                return
            }
            let answer =
                error is PostgresTimeout && committing.withLockedValue({ $0 })
                ? CartStoreError(
                    .storeUnavailable,
                    "the database gave no answer to COMMIT within \(connections.timeout): the change may or may not have been made; read the cart to tell"
                )
                : storage(error)
            for mutation in batch { mutation.caller.resume(throwing: answer) }
            return
        }
        // Committed: the next batches plan on its carts as it left them.
        cartCache.keep(committed.batch.cartsAfter)
        // Delivered here before the callers hear back, unless the database went
        // away just now or does not answer by the deadline (then the follower delivers it once
        // it is back; the commit stands).
        let follower = self.follower
        let events = committed.batch.events
        let previous = committed.batch.previous
        _ = try? await Deadline.race(
            until: deadline, on: connections.executor, expired: { PostgresTimeout(leased: true, after: self.connections.timeout) }
        ) {
            await follower.deliverQuietly(events, following: previous)
        }
        for (mutation, outcome) in zip(takeOnce(true), committed.outcomes) {
            mutation.caller.resume(with: outcome.mapError { storage($0) })
        }
    }

    /// Whether PostgreSQL refused a statement for the data in it (SQLSTATE class 22, data
    /// exception, or 23, integrity constraint violation), rather than for its own state.
    static func refusedForItsData(_ error: any Error) -> Bool {
        let inner = (error as? PostgresTransactionError).flatMap { $0.closureError } ?? error
        guard let state = (inner as? PSQLError)?.serverInfo?[.sqlState] else { return false }
        return state.hasPrefix("22") || state.hasPrefix("23")
    }

    /// One transaction for the mutations `take` gives once it holds the seq row, ended by
    /// `deadline` (`PostgresBatch`): each mutation's outcome, in `take`'s order, and the batch
    /// (its events, and the seq they follow). `committing` is set once the COMMIT is about to
    /// go out: from then on, a failure may have come after the commit.
    private func commitBatch(
        until deadline: ContinuousClock.Instant, committing: NIOLockedValueBox<Bool>,
        taking take: @escaping @Sendable () -> [CartMutation]
    ) async throws -> (outcomes: [Result<CartCommit, any Error>], batch: PostgresBatch) {
        let logger = self.logger
        let follower = self.follower
        let cache = cartCache
        return try await connections.withConnection(until: deadline) { connection in
            try await connection.withTransaction(logger: logger) { connection in
                var (batch, mutations) = try await PostgresBatch.load(connection, logger, cache: cache, taking: take)
                let committedAt = Date().millisecondsSince1970
                let outcomes = mutations.map { batch.plan($0, committedAt: committedAt) }
                try await batch.write(connection, logger)
                committing.withLockedValue { $0 = true }
                follower.committingOwnBatch(through: batch.latest)
                return (outcomes, batch)
            }
        }
    }

    /// The cart and its lines in one round trip (no row: no cart).
    static func loadCart(_ cartID: String, _ connection: PostgresConnection, _ logger: Logger) async throws -> Cart? {
        let rows = try await connection.query(
            """
            SELECT c.version, i.sku, i.quantity, i.unit_price_cents, i.name
            FROM carts c LEFT JOIN cart_items i ON i.cart_id = c.id
            WHERE c.id = \(cartID) ORDER BY i.position
            """, logger: logger)
        var version: Int64?
        var items: [CartItem] = []
        for try await (cartVersion, sku, quantity, price, name) in rows.decode((Int64, String?, Int64?, Int64?, String?).self) {
            version = cartVersion
            if let sku, let quantity, let price {
                items.append(CartItem(sku: sku, quantity: Int(quantity), unitPriceCents: Int(price), name: name))
            }
        }
        return version.map { Cart(id: cartID, version: $0, items: items) }
    }
}

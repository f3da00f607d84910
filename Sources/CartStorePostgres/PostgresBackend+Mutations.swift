import CartStore
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// Mutations on PostgreSQL: queued (`GroupCommit`), committed a batch per transaction under
/// the `event_seq` row lock, each by a deadline, then delivered by the follower before their
/// callers are answered.
extension PostgresBackend {
    func commit(_ mutation: CartMutation) async throws -> CartCommit {
        try await withCheckedThrowingContinuation { caller in
            do {
                if try commits.enqueue(.init(work: mutation, caller: caller)) {
                    Task { await self.drainCommits() }
                }
            } catch {
                caller.resume(throwing: error)
            }
        }
    }

    /// Commits waiting mutations a batch per transaction until none is left; after each, the
    /// follower delivers the log through the batch, then its callers are answered.
    ///
    /// A batch ends by its oldest mutation's deadline (`PostgresConnections.timeout` after it
    /// was queued); a mutation that waited that long behind earlier batches is answered at once,
    /// never started. So however the database fails, every caller hears within the README's
    /// 5 s (4 s for the database, the rest for this process to answer), and the next batch
    /// starts: nothing waits behind a batch that cannot end.
    private func drainCommits() async {
        while let taken = commits.nextBatch() {
            let now = ContinuousClock.now
            var batch: [GroupCommit<CartMutation>.Mutation] = []
            for mutation in taken {
                if mutation.queuedAt + PostgresConnections.timeout > now {
                    batch.append(mutation)
                } else {
                    mutation.caller.resume(
                        throwing: CartStoreError(
                            .storeUnavailable,
                            "the database gave no answer within \(PostgresConnections.timeout) to the changes before this one; nothing was written"
                        ))
                }
            }
            guard let oldest = batch.map(\.queuedAt).min() else { continue }
            let deadline = oldest + PostgresConnections.timeout
            let outcomes: [Result<CartCommit, any Error>]
            let committing = NIOLockedValueBox(false)
            do {
                outcomes = try await commitBatch(batch.map(\.work), until: deadline, committing: committing)
            } catch {
                let answer =
                    error is PostgresTimeout && committing.withLockedValue({ $0 })
                    ? CartStoreError(
                        .storeUnavailable,
                        "the database gave no answer to COMMIT within \(PostgresConnections.timeout): the change may or may not have been made; read the cart to tell"
                    )
                    : storage(error)
                for mutation in batch { mutation.caller.resume(throwing: answer) }
                continue
            }
            // Committed: delivered here before the callers hear back, unless the database went
            // away just now or does not answer by the deadline (then the follower delivers it
            // once it is back; the commit stands).
            let follower = self.follower
            _ = try? await Deadline.race(
                until: deadline, expired: { PostgresTimeout(leased: true, after: PostgresConnections.timeout) }
            ) {
                await follower.catchUpQuietly()
            }
            for (mutation, outcome) in zip(batch, outcomes) {
                mutation.caller.resume(with: outcome.mapError { storage($0) })
            }
        }
    }

    /// One transaction for `mutations`, ended by `deadline`. `committing` is set once the
    /// COMMIT is about to go out: from then on, a failure may have come after the commit.
    private func commitBatch(
        _ mutations: [CartMutation],
        until deadline: ContinuousClock.Instant, committing: NIOLockedValueBox<Bool>
    ) async throws -> [Result<CartCommit, any Error>] {
        let logger = self.logger
        return try await connections.withConnection(until: deadline) { connection in
            try await connection.withTransaction(logger: logger) { connection in
                let outcomes = try await Self.applyBatch(mutations, connection, logger)
                committing.withLockedValue { $0 = true }
                return outcomes
            }
        }
    }

    /// The batch's mutations, inside its transaction: the seq row locked, then each in a savepoint.
    private static func applyBatch(
        _ mutations: [CartMutation], _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> [Result<CartCommit, any Error>] {
        // Every writer of every server, one after the other from here to COMMIT.
        // Collected, so that a lock timeout is thrown here, not found by the next statement.
        _ = try await connection.query("SELECT latest FROM event_seq FOR UPDATE", logger: logger).collect()
        // A batch of one needs no savepoint: if it fails, the whole transaction rolls back.
        if mutations.count == 1 {
            return [.success(try await apply(mutations[0], connection, logger))]
        }
        var outcomes: [Result<CartCommit, any Error>] = []
        for mutation in mutations {
            try await connection.query("SAVEPOINT mutation", logger: logger)
            do {
                let commit = try await apply(mutation, connection, logger)
                try await connection.query("RELEASE SAVEPOINT mutation", logger: logger)
                outcomes.append(.success(commit))
            } catch {
                try await connection.query("ROLLBACK TO SAVEPOINT mutation", logger: logger)
                try await connection.query("RELEASE SAVEPOINT mutation", logger: logger)
                outcomes.append(.failure(error))
            }
        }
        return outcomes
    }

    /// One mutation, inside the batch's transaction: the cart read, the plan, its rows written.
    private static func apply(
        _ mutation: CartMutation, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> CartCommit {
        let plan = try mutation.plan(
            stored: try await loadCart(mutation.cartID, connection, logger), committedAt: Date().millisecondsSince1970)
        let event = plan.event
        let cartID = event.cartID
        // One statement, one round trip: the next seq, the log row, the cart's version, its
        // line, and the notification, which listeners get when the transaction commits, never
        // before (a rolled-back savepoint takes it back). The line's foreign key is checked at
        // the end of the statement, when the cart row is there.
        var binds = PostgresBindings()
        binds.append(cartID)  // $1
        binds.append(event.kind.rawValue)  // $2
        binds.append(plan.encodedChange)  // $3
        binds.append(event.version)  // $4, the cart's version after it too
        binds.append(plan.committedAt)  // $5
        let line: String
        switch event.change {
        case .itemAdded(let item, _):
            binds.append(item.sku)
            binds.append(Int64(item.quantity))
            binds.append(Int64(item.unitPriceCents))
            binds.append(item.name)
            // Upsert that keeps an existing line's position.
            line = """
                INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position)
                SELECT $1, $6, $7, $8, $9, latest FROM next
                ON CONFLICT (cart_id, sku) DO UPDATE SET
                    quantity = excluded.quantity, unit_price_cents = excluded.unit_price_cents, name = excluded.name
                """
        case .quantityChanged(let sku, let quantity):
            binds.append(sku)
            binds.append(Int64(quantity))
            line = "UPDATE cart_items SET quantity = $7 WHERE cart_id = $1 AND sku = $6"
        case .itemRemoved(let sku):
            binds.append(sku)
            line = "DELETE FROM cart_items WHERE cart_id = $1 AND sku = $6"
        case .cartCleared:
            line = "DELETE FROM cart_items WHERE cart_id = $1"
        }
        let statement = """
            WITH next AS (UPDATE event_seq SET latest = latest + 1 RETURNING latest),
            logged AS (
                INSERT INTO cart_events (seq, cart_id, kind, change, cart_version, committed_at)
                SELECT latest, $1, $2, $3, $4, $5 FROM next),
            cart AS (
                INSERT INTO carts (id, version) VALUES ($1, $4)
                ON CONFLICT (id) DO UPDATE SET version = excluded.version),
            line AS (\(line))
            SELECT latest, pg_notify('\(PostgresFollower.channel)', latest::text) FROM next
            """
        guard
            let (seq, _) = try await connection.query(PostgresQuery(unsafeSQL: statement, binds: binds), logger: logger)
                .collect().first?.decode((Int64, String?).self)
        else {
            throw CartStoreError(.storeUnavailable, "the event_seq row is missing; nothing was written")
        }
        return plan.committed(seq: seq)
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

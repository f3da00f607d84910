import CartStore
import Foundation
import PostgresNIO

/// One batch of mutations as its transaction plans them, between the reads and the one write.
///
/// The transaction takes the `event_seq` row first (every writer of every server waits there),
/// then reads every cart of the batch in one query (`load`: each cart's version, and its lines
/// unless the server's `CartCache` holds the cart at that version). Each mutation is then planned in
/// memory, in order, on the carts as the ones before it left them: a refused one takes no seq
/// and writes nothing, so no savepoint is needed, and the seqs taken are `latest + 1…` without
/// gaps. What the batch changed goes out in one statement (`write`): the events, the carts'
/// versions, the lines added or changed, the lines removed, the new `latest`, and one
/// notification. So a batch costs the same few round trips whether it holds one change or a
/// thousand.
///
/// A keyed mutation's key is looked up under the same lock (`ReadKeys`, only for a batch with
/// keys): a key another transaction kept is seen, and a repeat is answered from it without a
/// seq; a key kept earlier in the batch is answered from memory. A new key is written with its
/// event, in the same statement.
struct PostgresBatch: Sendable {
    /// The newest seq when the batch took the row: its events follow it.
    let previous: Int64
    /// The batch's carts as its planned mutations leave them (absent: never changed).
    private var carts: [String: Cart]
    /// Each cart's lines by sku: the seq of the event that put the line in the cart (its order).
    private var positions: [String: LinePositions]
    /// Lines to write (added or changed) and lines to delete, by cart: disjoint at the end.
    private var changedLines: [String: Set<String>] = [:]
    private var removedLines: [String: Set<String>] = [:]
    /// The events planned, in seq order, with their encoded changes.
    private(set) var events: [CartEvent] = []
    private var encodedChanges: [String] = []
    /// The keys of the batch's keyed mutations that are kept: read, or planned in this batch.
    private var rememberedKeys: [IdempotencyKey: RememberedCommit]
    /// The keys the batch's events keep, to be written with them.
    private var keptKeys: [(key: IdempotencyKey, seq: Int64, remembered: RememberedCommit)] = []

    /// Takes the seq row, then the batch's mutations (`take`: what waits by then), then reads
    /// their carts (and keys), on `connection` inside the batch's transaction. The carts are
    /// read in a statement of their own, after the lock: a statement sees the database as it
    /// was when it started, and one that waited for the lock would miss the commit it waited
    /// for. Taking the mutations only once the row is held makes the batch as large as the
    /// wait allowed: with several servers, each one's next changes gather while the others'
    /// batches hold the row.
    ///
    /// A cart `cache` keeps at the version the database has is planned on as kept, without
    /// reading its lines (`CartCache`); the others are read whole.
    static func load(
        _ connection: PostgresConnection, _ logger: Logger, cache: CartCache, taking take: @Sendable () -> [CartMutation]
    ) async throws -> (batch: PostgresBatch, mutations: [CartMutation]) {
        // Collected, so that a lock timeout is thrown here, not found by the next statement.
        var taken: Int64?
        for try await latest in try await connection.execute(TakeSeq(), logger: logger) { taken = latest }
        guard let latest = taken else {
            throw CartStoreError(.storeUnavailable, "the event_seq row is missing; nothing was written")
        }
        let mutations = take()
        let cartIDs = Array(Set(mutations.map(\.cartID)))
        let keys = Array(Set(mutations.compactMap(\.keyed?.key)))
        let kept = cache.entries(cartIDs, latest: latest)
        var carts: [String: Cart] = [:]
        var positions: [String: LinePositions] = [:]
        let read = ReadCarts(ids: cartIDs, keptVersions: cartIDs.map { kept[$0]?.cart.version ?? -1 })
        for try await (id, version, lines) in try await connection.execute(read, logger: logger) {
            if let lines {
                carts[id] = lines.cart
                positions[id] = lines.positions
            } else if let entry = kept[id], entry.cart.version == version {
                carts[id] = entry.cart
                positions[id] = entry.positions
            } else {
                throw CartStoreError(.storeUnavailable, "cart \(id) was read back without its lines; nothing was written")
            }
        }
        var remembered: [IdempotencyKey: RememberedCommit] = [:]
        if !keys.isEmpty {
            for try await (scope, key, fingerprint, answer) in try await connection.execute(ReadKeys(keys: keys), logger: logger) {
                guard let key = try? IdempotencyKey(key, scope: scope) else { continue }
                remembered[key] = RememberedCommit(fingerprint: fingerprint, commit: answer)
            }
        }
        return (PostgresBatch(previous: latest, carts: carts, positions: positions, rememberedKeys: remembered), mutations)
    }

    private init(
        previous: Int64, carts: [String: Cart], positions: [String: LinePositions], rememberedKeys: [IdempotencyKey: RememberedCommit]
    ) {
        self.previous = previous
        self.carts = carts
        self.positions = positions
        self.rememberedKeys = rememberedKeys
    }

    /// The newest seq once the batch is written.
    var latest: Int64 { previous + Int64(events.count) }

    /// Every cart the batch read or changed, as it leaves them: what its commit made them
    /// (`CartCache.keep`).
    var cartsAfter: [String: CartCache.Entry] {
        carts.mapValues { CartCache.Entry(cart: $0, positions: positions[$0.id] ?? LinePositions()) }
    }

    /// Plans `mutation` on its cart as the batch has it so far; on success the event takes the
    /// next seq and the cart is changed in memory. A refusal changes nothing.
    mutating func plan(_ mutation: CartMutation, committedAt: Int64) -> Result<CartCommit, any Error> {
        if let keyed = mutation.keyed, let remembered = rememberedKeys[keyed.key] {
            return Result { try remembered.answer(to: keyed) }
        }
        let plan: MutationPlan
        do {
            plan = try mutation.plan(stored: carts[mutation.cartID], committedAt: committedAt)
        } catch {
            return .failure(error)
        }
        let commit = plan.committed(seq: latest + 1)
        if let (keyed, remembered) = mutation.remembered(commit) {
            rememberedKeys[keyed.key] = remembered
            keptKeys.append((keyed.key, commit.event.seq, remembered))
        }
        let cartID = commit.event.cartID
        events.append(commit.event)
        encodedChanges.append(plan.encodedChange)
        carts[cartID] = plan.after
        let gone = positions[cartID, default: LinePositions()].apply(commit.event.change, at: commit.event.seq)
        switch commit.event.change {
        case .itemAdded(let item, _): changed(item.sku, in: cartID)
        case .quantityChanged(let sku, _): changed(sku, in: cartID)
        case .itemRemoved, .cartCleared: removed(gone, from: cartID)
        }
        return .success(commit)
    }

    private mutating func changed(_ sku: String, in cartID: String) {
        changedLines[cartID, default: []].insert(sku)
        removedLines[cartID]?.remove(sku)
    }

    private mutating func removed(_ skus: [String], from cartID: String) {
        for sku in skus {
            changedLines[cartID]?.remove(sku)
            removedLines[cartID, default: []].insert(sku)
        }
    }

    /// Writes what the planned mutations changed, in one statement, and NOTIFYs the followers
    /// once, with the batch's seqs and, when they fit, its events (`BatchAnnouncement`;
    /// listeners hear it when the transaction commits, never before). Nothing to write when every
    /// mutation was refused.
    func write(_ connection: PostgresConnection, _ logger: Logger) async throws {
        guard !events.isEmpty else { return }
        var lineCarts: [String] = []
        var lineSkus: [String] = []
        var quantities: [Int64] = []
        var prices: [Int64] = []
        var named: [Bool] = []
        var names: [String] = []
        var lineSeqs: [Int64] = []
        for (cartID, skus) in changedLines {
            guard let cart = carts[cartID] else { continue }
            for item in cart.items where skus.contains(item.sku) {
                lineCarts.append(cartID)
                lineSkus.append(item.sku)
                quantities.append(Int64(item.quantity))
                prices.append(Int64(item.unitPriceCents))
                named.append(item.name != nil)
                names.append(item.name ?? "")
                lineSeqs.append(positions[cartID]?[item.sku] ?? latest)
            }
        }
        var goneCarts: [String] = []
        var goneSkus: [String] = []
        for (cartID, skus) in removedLines {
            for sku in skus {
                goneCarts.append(cartID)
                goneSkus.append(sku)
            }
        }
        // Every cart the batch changed has an event.
        let touchedIDs = Array(Set(events.map(\.cartID)))
        let write = Write(
            seqs: events.map(\.seq), cartIDs: events.map(\.cartID), kinds: events.map(\.kind.rawValue),
            changes: encodedChanges, versions: events.map(\.version), committedAt: events.map { $0.committedAt.millisecondsSince1970 },
            latest: latest, touched: touchedIDs, touchedVersions: touchedIDs.map { carts[$0]?.version ?? 0 },
            lineCarts: lineCarts, lineSkus: lineSkus, quantities: quantities, prices: prices, named: named, names: names,
            positions: lineSeqs, goneCarts: goneCarts, goneSkus: goneSkus,
            eventKeys: events.map { $0.idempotencyKey ?? "" }, keyScopes: keptKeys.map(\.key.scope), keys: keptKeys.map(\.key.key),
            fingerprints: keptKeys.map(\.remembered.fingerprint), keySeqs: keptKeys.map(\.seq),
            answers: keptKeys.map(\.remembered.commit),
            announcement: BatchAnnouncement.payload(previous: previous, latest: latest, events: events, changes: encodedChanges))
        // Its one row (the notification's) read to the end: only then is the statement done.
        for try await _ in try await connection.execute(write, logger: logger) {}
    }

    // MARK: Statements

    // Prepared once per connection (PostgresNIO keeps them by name): PostgreSQL parses and
    // plans the batch's statements once, not per batch.

    /// Takes the seq row, held to COMMIT.
    struct TakeSeq: PostgresPreparedStatement {
        static let sql = "SELECT latest FROM event_seq FOR UPDATE"
        func makeBindings() -> PostgresBindings { PostgresBindings() }
        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
    }

    /// The carts `ids`, a row each, with their lines as arrays (one row per line cost the
    /// server a row's decoding per line, for every line of every cart a batch changes), and
    /// each line's position. The arrays are aggregated together, so they agree element by
    /// element, in no particular order: the lines are put in order of position here (an
    /// `ORDER BY` in each aggregate was six sorts per cart, most of the read's cost).
    ///
    /// Each cart, and its lines, is looked up by its index, one cart at a time (`OFFSET 0`
    /// keeps PostgreSQL from flattening the lookups into a join it may plan as a scan of every
    /// line): the read runs under the seq row, so its cost must follow the batch, not the
    /// table. Planned as a join, it scanned all of `cart_items` for every batch (1.4 ms a batch
    /// at 12 000 lines, growing with them).
    ///
    /// A cart whose version is the one kept (`keptVersions`, -1 for none, element by element
    /// with `ids`) comes without its lines (`nil`): its lines are not read at all (the
    /// aggregate's condition is false before any line is looked up).
    struct ReadCarts: PostgresPreparedStatement {
        static let sql = """
            SELECT c.id, c.version, c.version = asked.kept, l.skus, l.quantities, l.prices, l.named, l.names, l.positions
            FROM unnest($1::text[], $2::bigint[]) AS asked(id, kept)
            JOIN LATERAL (SELECT id, version FROM carts WHERE id = asked.id OFFSET 0) c ON true
            LEFT JOIN LATERAL (
                SELECT array_agg(sku) AS skus, array_agg(quantity::bigint) AS quantities, array_agg(unit_price_cents) AS prices,
                    array_agg(name IS NOT NULL) AS named, array_agg(coalesce(name, '')) AS names, array_agg(position) AS positions
                FROM cart_items WHERE cart_id = c.id AND c.version <> asked.kept OFFSET 0
            ) l ON true
            """
        let ids: [String]
        let keptVersions: [Int64]
        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(ids)
            binds.append(keptVersions)
            return binds
        }
        /// A cart's id and version, and, unless it is the version kept, its lines.
        func decodeRow(_ row: PostgresRow) throws -> (String, Int64, CartCache.Entry?) {
            let (id, version, isKept, skus, quantities, prices, named, names, positions) = try row.decode(
                (String, Int64, Bool, [String]?, [Int64]?, [Int64]?, [Bool]?, [String]?, [Int64]?).self)
            if isKept { return (id, version, nil) }
            var cart = Cart(id: id, version: version)
            var linePositions: [String: Int64] = [:]
            if let skus, let quantities, let prices, let named, let names, let positions {
                guard quantities.count == skus.count, prices.count == skus.count, named.count == skus.count,
                    names.count == skus.count, positions.count == skus.count
                else { throw CartStoreError(.storeUnavailable, "cart \(id)'s lines were read back malformed; nothing was written") }
                cart.items.reserveCapacity(skus.count)
                for index in skus.indices.sorted(by: { positions[$0] < positions[$1] }) {
                    cart.items.append(
                        CartItem(
                            sku: skus[index], quantity: Int(quantities[index]), unitPriceCents: Int(prices[index]),
                            name: named[index] ? names[index] : nil))
                    linePositions[skus[index]] = positions[index]
                }
            }
            return (id, version, CartCache.Entry(cart: cart, positions: LinePositions(linePositions)))
        }
    }

    /// The kept keys among `keys`, with their fingerprints and answers.
    struct ReadKeys: PostgresPreparedStatement {
        static let sql = """
            SELECT k.scope, k.key, k.fingerprint, k.answer
            FROM idempotency_keys k JOIN unnest($1::text[], $2::text[]) AS asked(scope, key) USING (scope, key)
            """
        let keys: [IdempotencyKey]
        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(keys.map(\.scope))
            binds.append(keys.map(\.key))
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws -> (String, String, String, String) {
            try row.decode((String, String, String, String).self)
        }
    }

    /// Everything a batch writes, as arrays, one element per event, cart, line or key.
    struct Write: PostgresPreparedStatement {
        static let sql = """
            WITH logged AS (
                INSERT INTO cart_events (seq, cart_id, kind, change, cart_version, committed_at, idempotency_key)
                SELECT seq, cart_id, kind, change, version, at, NULLIF(key, '')
                FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $20::text[])
                    AS e(seq, cart_id, kind, change, version, at, key)),
            kept AS (
                INSERT INTO idempotency_keys (scope, key, fingerprint, seq, answer, created_at)
                SELECT scope, key, fingerprint, seq, answer, $6[1]
                FROM unnest($21::text[], $22::text[], $23::text[], $24::bigint[], $25::text[])
                    AS k(scope, key, fingerprint, seq, answer)),
            seq AS (UPDATE event_seq SET latest = $7),
            cart AS (
                INSERT INTO carts (id, version) SELECT * FROM unnest($8::text[], $9::bigint[])
                ON CONFLICT (id) DO UPDATE SET version = excluded.version),
            line AS (
                INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position)
                SELECT cart_id, sku, quantity, price, CASE WHEN named THEN name END, position
                FROM unnest($10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::bool[], $15::text[], $16::bigint[])
                    AS l(cart_id, sku, quantity, price, named, name, position)
                ON CONFLICT (cart_id, sku) DO UPDATE SET
                    quantity = excluded.quantity, unit_price_cents = excluded.unit_price_cents, name = excluded.name,
                    position = excluded.position),
            gone AS (
                DELETE FROM cart_items WHERE (cart_id, sku) IN (SELECT * FROM unnest($17::text[], $18::text[])))
            SELECT pg_notify('\(PostgresFollower.channel)', $19)
            """

        let seqs: [Int64], cartIDs: [String], kinds: [String], changes: [String], versions: [Int64], committedAt: [Int64]
        let latest: Int64
        let touched: [String], touchedVersions: [Int64]
        let lineCarts: [String], lineSkus: [String], quantities: [Int64], prices: [Int64], named: [Bool], names: [String],
            positions: [Int64]
        let goneCarts: [String], goneSkus: [String]
        /// Each event's key ("" for none), and the keys kept, with what they answer.
        let eventKeys: [String]
        let keyScopes: [String], keys: [String], fingerprints: [String], keySeqs: [Int64], answers: [String]
        /// The notification's payload (`BatchAnnouncement`).
        let announcement: String

        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(seqs)  // $1
            binds.append(cartIDs)  // $2
            binds.append(kinds)  // $3
            binds.append(changes)  // $4
            binds.append(versions)  // $5
            binds.append(committedAt)  // $6
            binds.append(latest)  // $7
            binds.append(touched)  // $8
            binds.append(touchedVersions)  // $9
            binds.append(lineCarts)  // $10
            binds.append(lineSkus)  // $11
            binds.append(quantities)  // $12
            binds.append(prices)  // $13
            binds.append(named)  // $14
            binds.append(names)  // $15
            binds.append(positions)  // $16
            binds.append(goneCarts)  // $17
            binds.append(goneSkus)  // $18
            binds.append(announcement)  // $19
            binds.append(eventKeys)  // $20
            binds.append(keyScopes)  // $21
            binds.append(keys)  // $22
            binds.append(fingerprints)  // $23
            binds.append(keySeqs)  // $24
            binds.append(answers)  // $25
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws {}
    }
}

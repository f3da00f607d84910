import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CartStore
@testable import CartStorePostgres

/// What only the PostgreSQL engine does: several stores on one database, and delivery that
/// does not depend on notifications arriving.
@Suite(
    "PostgreSQL store", .tags(.postgres), .outsideTheFastSet, .timeLimit(.minutes(2)),
    .needsPostgreSQL)
struct PostgresStoreTests {
    /// On a loaded machine (a full run on two cores) a change may wait out its deadline behind
    /// the other store's batches and be refused (`storeUnavailable`, "nothing was written", or
    /// after its COMMIT went out, "may or may not"): that is the store keeping its promise to
    /// answer within 5 s, not what this test is about. What it asserts holds for whatever was
    /// committed: both stores deliver the one gap-free log, in the same order.
    @Test func twoStoresOnOneDatabaseSeeEachOthersCommitsInOneOrder() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let first = try await PostgresCartStore.running(url: url)
        let second = try await PostgresCartStore.running(url: url)
        defer {
            try? first.close()
            try? second.close()
        }
        let seenByFirst = RecordingObserver()
        let seenBySecond = RecordingObserver()
        first.observers.add(seenByFirst)
        second.observers.add(seenBySecond)
        let refused = try await withThrowingTaskGroup(of: Int.self) { group in
            for writer in 0..<4 {
                let store = writer % 2 == 0 ? first : second
                group.addTask {
                    var refused = 0
                    for index in 0..<25 {
                        do {
                            try await store.addItem(cartID: "c\(index % 5)", sku: "s\(writer)", quantity: 1, unitPriceCents: 10)
                        } catch  where CartStoreError.code(error) == .storeUnavailable {
                            refused += 1
                        }
                    }
                    return refused
                }
            }
            return try await group.reduce(0, +)
        }
        let log = try await wholeLog(second)
        #expect(log.count >= 50, "most of the 100 changes made (\(refused) refused as unavailable)")
        let expected = Array(Int64(1)...Int64(log.count))
        #expect(log.map(\.seq) == expected, "one gap-free log")
        await eventually("both stores delivered every commit") {
            seenByFirst.seqs.count >= log.count && seenBySecond.seqs.count >= log.count
        }
        #expect(firstDifference(seenByFirst.seqs, expected) == nil, "the first store's deliveries")
        #expect(firstDifference(seenBySecond.seqs, expected) == nil, "the second store's deliveries")
        #expect(seenByFirst.received == seenBySecond.received, "the same events, the same order")
        #expect(seenByFirst.received == log, "the log's events")
        // Both wrote to the same carts: each cart's versions follow one another in the log.
        for cart in try await second.carts() {
            #expect(log.filter { $0.cartID == cart.id }.map(\.version) == Array(1...cart.version))
        }
        #expect(fold(log) == (try await first.carts()))
    }

    /// The scoped helper: the store works inside `body`, and is closed when it returns — its
    /// observers hear of the commit made inside, and the store says `closed` after.
    @Test func withPostgresRunsTheStoreForItsBodyAndClosesItAfter() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let observer = RecordingObserver()
        let store = try await CartStore.withPostgres(url: url, deadline: PostgresCartStore.testDeadline) { store in
            store.observers.add(observer)
            try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
            #expect(store.connectionState == .live)
            return store
        }
        #expect(observer.seqs == [1])
        #expect(store.connectionState == .closed)
    }

    /// A `PostgresCartStore` is a service: a change made before it runs waits for it, and
    /// `run()` returns once the store is closed (a service group's task would otherwise never
    /// end).
    @Test func theServiceRunsUntilItsStoreIsClosed() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let postgres = try await PostgresCartStore(url: url, deadline: PostgresCartStore.testDeadline)
        let early = Task { try await postgres.store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1) }
        let ended = NIOLockedValueBox(false)
        let running = Task {
            try await postgres.run()
            ended.withLockedValue { $0 = true }
        }
        #expect(try await early.value.event.seq == 1)
        #expect(!ended.withLockedValue { $0 })
        try postgres.store.close()
        #expect(await eventually("run() to return") { ended.withLockedValue { $0 } })
        running.cancel()
    }

    /// A commit that notifies nobody (written straight into the tables, as a server that died
    /// between its COMMIT and the notification would leave it) still reaches observers.
    @Test func aCommitWhoseNotificationNeverCameIsDeliveredByThePoll() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        let observer = RecordingObserver()
        store.observers.add(observer)
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await Self.commitUnheard(on: url, cart: "quiet", version: 1, kind: "cartCleared", change: #"{"kind":"cartCleared"}"#)
        await eventually("the silent commit to be delivered") { observer.seqs == [1, 2] }
        #expect(observer.received.last?.cartID == "quiet")
    }

    /// A cart changed where this server did not hear of it (written straight into the tables,
    /// no notification): its next change is planned on the cart as stored, not as this server
    /// last left it, and the same store's next change on the cart as that one left it.
    @Test func aChangeIsPlannedOnTheStoredCartNotOnTheOneThisServerLastWrote() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1)
        try await Self.commitUnheard(
            on: url, cart: "c", version: 3, kind: "itemRemoved", change: #"{"kind":"itemRemoved","sku":"a"}"#,
            tables: ["UPDATE carts SET version = 3 WHERE id = 'c'", "DELETE FROM cart_items WHERE cart_id = 'c' AND sku = 'a'"])
        let answered = try await store.addItem(cartID: "c", sku: "d", quantity: 1, unitPriceCents: 1)
        #expect(answered.cart.version == 4)
        #expect(answered.cart.items.map(\.sku) == ["b", "d"])
        let next = try await store.setQuantity(cartID: "c", sku: "b", quantity: 5)
        #expect(next.cart.version == 5)
        #expect(next.cart.items.map(\.quantity) == [5, 1])
        #expect(try await store.cart("c") == next.cart)
        let log = try await wholeLog(store)
        #expect(log.filter { $0.cartID == "c" }.map(\.version) == [1, 2, 3, 4, 5])
        #expect(fold(log) == (try await store.carts()))
    }

    /// A change made by hand (psql) to the carts' tables is refused, saying how to make it: an
    /// UPDATE of a line was read back, and the next write through a server that had the cart in
    /// its cache wrote over it (a line deleted by hand came back), and no subscriber ever heard
    /// of either. Through the store (the HTTP API's path), the same fix has its event.
    @Test func aCartChangedByHandIsRefusedWithTheWayToChangeIt() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        try await store.addItem(cartID: "m1", sku: "pear", quantity: 1, unitPriceCents: 80)
        let server = try await SharedPostgres.shared.server()
        let byHand = [
            "UPDATE cart_items SET quantity = 50 WHERE cart_id = 'm1' AND sku = 'pear'",
            "DELETE FROM cart_items WHERE cart_id = 'm1'",
            "INSERT INTO cart_items VALUES ('m1', 'fig', 1, 1, NULL, 99)",
            "UPDATE carts SET version = 9",
            "DELETE FROM cart_events",
            "TRUNCATE cart_items",
        ]
        for statement in byHand {
            do {
                _ = try await server.psql(statement, on: url)
                Issue.record("accepted: \(statement)")
            } catch {
                #expect("\(error)".contains("changed only through fanout's HTTP API"), "\(statement): \(error)")
                #expect("\(error)".contains("Fixing a cart by hand"), "the way is named")
            }
        }
        #expect(try await server.psql("SELECT quantity FROM cart_items WHERE cart_id = 'm1'", on: url) == "1\n", "nothing changed")
        let fixed = try await store.setQuantity(cartID: "m1", sku: "pear", quantity: 50)
        #expect(fixed.cart.version == 2 && fixed.cart.items.map(\.quantity) == [50])
        let next = try await store.addItem(cartID: "m1", sku: "fig", quantity: 1, unitPriceCents: 10)
        #expect(next.cart.items.map(\.quantity) == [50, 1], "the fix stands")
        #expect(try await wholeLog(store).map(\.version) == [1, 2, 3], "every change has its event")
    }

    /// Commits an event of `cart` at `version` as no server would: straight into the log (and
    /// `tables`, the carts' side of it, if any), without a notification.
    static func commitUnheard(
        on url: String, cart: String, version: Int64, kind: String, change: String, tables: [String] = []
    ) async throws {
        let server = try await SharedPostgres.shared.server()
        let event = """
            INSERT INTO cart_events (seq, cart_id, kind, change, cart_version, committed_at)
            SELECT latest, '\(cart)', '\(kind)', '\(change)', \(version), 0 FROM event_seq
            """
        // As a server's session: the tables refuse any other's changes.
        let statements =
            ["BEGIN", "SET LOCAL fanout.writer = 'on'", "UPDATE event_seq SET latest = latest + 1"] + tables + [event, "COMMIT"]
        _ = try await server.psql(statements, on: url)
    }

    /// The LISTEN connection killed by the server: the store listens again, and what was
    /// committed meanwhile arrives, in order, once.
    @Test func aKilledListenConnectionLosesNothing() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let writer = try await PostgresCartStore.running(url: url)
        let reader = try await PostgresCartStore.running(url: url)
        defer {
            try? writer.close()
            try? reader.close()
        }
        let observer = RecordingObserver()
        reader.observers.add(observer)
        let server = try await SharedPostgres.shared.server()
        let listening = "FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        for round in 0..<3 {
            await eventually("both stores listening (round \(round))") {
                (try? await server.psql("SELECT count(*) \(listening)", on: url))?.trimmingCharacters(in: .whitespacesAndNewlines) == "2"
            }
            _ = try await server.psql("SELECT pg_terminate_backend(pid) \(listening)", on: url)
            for index in 0..<10 {
                try await writer.addItem(cartID: "r\(round)", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
            }
        }
        await eventually("all 30 commits") { observer.seqs.count >= 30 }
        #expect(observer.seqs == Array(Int64(1)...30))
    }
}

extension PostgresStoreTests {
    /// Servers started together on a new database: one migrates, the others wait for it (the
    /// advisory lock) and find the schema there; all of them work.
    @Test func storesOpenedAtOnceOnANewDatabaseMigrateItOnce() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let stores = try await withThrowingTaskGroup(of: CartStore.self) { group in
            for _ in 0..<4 { group.addTask { try await PostgresCartStore.running(url: url) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        defer { for store in stores { try? store.close() } }
        for (index, store) in stores.enumerated() {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        #expect(try await stores[0].cart("c")?.items.count == 4)
        let server = try await SharedPostgres.shared.server()
        let applied = try await server.psql("SELECT name FROM fanout_migrations ORDER BY name", on: url)
        #expect(applied.split(separator: "\n").map(String.init) == PostgresSchema.migrations.map(\.name), "each migration recorded once")
    }

    /// The identity is the database's: every store on it says the same, a store opened on it
    /// again says it too, and another database has its own.
    @Test func theIdentityIsTheDatabasesSharedByItsStoresAndKept() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let first = try await PostgresCartStore.running(url: url)
        let second = try await PostgresCartStore.running(url: url)
        let identity = first.databaseID
        #expect(isDatabaseIdentity(identity), "\(identity)")
        #expect(second.databaseID == identity, "two stores on one database")
        try first.close()
        try second.close()

        let reopened = try await PostgresCartStore.running(url: url)
        defer { try? reopened.close() }
        #expect(reopened.databaseID == identity, "the same after reopening")
        let other = try await PostgresCartStore.running(url: try await SharedPostgres.shared.newDatabase())
        defer { try? other.close() }
        #expect(isDatabaseIdentity(other.databaseID))
        #expect(other.databaseID != identity, "another database, another identity")
    }

    /// A database made before identities (0003 not applied) gets one when a store migrates it,
    /// keeps its carts, and says the same identity from then on.
    @Test func aDatabaseFromBeforeIdentitiesGetsOneWhenMigrated() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        try await store.addItem(cartID: "c", sku: "a", quantity: 2, unitPriceCents: 1)
        try store.close()
        let server = try await SharedPostgres.shared.server()
        _ = try await server.psql(
            "DROP TABLE database_identity", "DELETE FROM fanout_migrations WHERE name = '0003_database_identity'", on: url)

        let migrated = try await PostgresCartStore.running(url: url)
        let identity = migrated.databaseID
        #expect(isDatabaseIdentity(identity))
        #expect(try await migrated.cart("c")?.items.first?.quantity == 2)
        try migrated.close()
        let again = try await PostgresCartStore.running(url: url)
        defer { try? again.close() }
        #expect(again.databaseID == identity)
    }

    /// A database with another program's tables is refused and left as it was.
    @Test func anotherProgramsDatabaseIsRefusedUntouched() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let server = try await SharedPostgres.shared.server()
        _ = try await server.psql("CREATE TABLE invoices (id integer)", on: url)
        await #expect { try await PostgresCartStore.running(url: url) } throws: { CartStoreError.code($0) == .notAFanoutDatabase }
        #expect(try await server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", on: url) == "1\n", "nothing added")
    }
}

/// Commits that cannot finish: a clear error in bounded time, never a hang, and no gap after.
extension PostgresStoreTests {
    /// Another session holds the seq row (a server stuck in the middle of its commit): a writer
    /// here gives up after `lock_timeout` with `storeUnavailable` instead of waiting with it,
    /// and writes go through once the row is free.
    @Test func aWriterBehindAStuckCommitIsRefusedNotHung() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        // 12 s (lock_timeout 9 s): the refusal comes from the lock's wait, inside the deadline,
        // and the first write has room on a machine busy with the whole suite (it once took
        // more than the default 4 s to commit in CI).
        let store = try await PostgresCartStore.running(url: url, deadline: .seconds(12))
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        // Held until the test ends that session (the sleep is far longer than the test).
        let holder = try await SeqRowHolder.hold(on: url)
        await #expect { try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1) } throws: { error in
            CartStoreError.code(error) == .storeUnavailable && "\(error)".contains("nothing was written")
        }
        try await holder.release()
        try await store.addItem(cartID: "c", sku: "c", quantity: 1, unitPriceCents: 1)
        #expect(try await wholeLog(store).map(\.seq) == [1, 2])
        #expect(try await store.cart("c")?.items.map(\.sku) == ["a", "c"])
    }

    /// A batch whose session dies while it waits for the seq row fails alone: a change queued
    /// after that batch started is not taken into its failure, and commits once the row is
    /// free (a batch is taken only when the row is held, or, failing before, only what waited
    /// when it started).
    @Test func aBatchThatFailsBeforeTheRowTakesOnlyWhatWaitedForIt() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "warm", quantity: 1, unitPriceCents: 1)
        let server = try await SharedPostgres.shared.server()
        let holder = try await SeqRowHolder.hold(on: url)
        let first = Task { try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 1) }
        await eventually("the first batch started") { store.backend.batchUnderWayFor != nil && store.waitingChanges == 1 }
        let waitingForTheRow = """
            FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query = 'SELECT latest FROM event_seq FOR UPDATE'
            """
        await eventually("its session waiting for the row") {
            (try? await server.psql("SELECT count(*) \(waitingForTheRow)", on: url)) == "1\n"
        }
        let second = Task { try await store.addItem(cartID: "b", sku: "y", quantity: 1, unitPriceCents: 1) }
        await eventually("the second change queued") { store.waitingChanges == 2 }
        _ = try await server.psql("SELECT pg_terminate_backend(pid) \(waitingForTheRow)", on: url)
        await #expect(throws: (any Error).self) { try await first.value }
        try await holder.release()
        let committed = try await second.value
        #expect(committed.cart.items.map(\.sku) == ["y"])
        #expect(try await wholeLog(store).map(\.cartID) == ["c", "b"])
    }

    /// Changes that pile up behind a held seq row commit as one batch, planned in memory one
    /// after the other: a line removed and added again goes last, a refused change takes no
    /// seq, a cleared cart starts over, and the carts read back are the log replayed in order.
    /// A change the database itself refuses (a constraint the plans do not know) fails alone;
    /// the others of its batch are committed.
    @Test func aBatchOfChangesLeavesTheCartsAsTheirEventsInOrder() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
        try await store.addItem(cartID: "d", sku: "x", quantity: 1, unitPriceCents: 1)
        let refused = try await Self.queuedBehindTheHeldRow(
            store, url: url,
            [
                { try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 2) },
                { try await store.addItem(cartID: "c", sku: "c", quantity: 1, unitPriceCents: 3, name: "named") },
                { try await store.removeItem(cartID: "c", sku: "a") },
                { try await store.setQuantity(cartID: "c", sku: "missing", quantity: 2) },
                { try await store.addItem(cartID: "c", sku: "a", quantity: 4, unitPriceCents: 5) },
                { try await store.setQuantity(cartID: "c", sku: "b", quantity: 7) },
                { try await store.clearCart(cartID: "d") },
                { try await store.addItem(cartID: "d", sku: "y", quantity: 1, unitPriceCents: 1) },
                { try await store.addItem(cartID: "new", sku: "z", quantity: 2, unitPriceCents: 1, expectedVersion: 0) },
                { try await store.addItem(cartID: "c", sku: "late", quantity: 1, unitPriceCents: 1, expectedVersion: 1) },
            ])
        #expect(refused == [4: .itemNotFound, 10: .versionConflict])
        let server = try await SharedPostgres.shared.server()
        _ = try await server.psql("ALTER TABLE cart_items ADD CONSTRAINT not_this_one CHECK (sku <> 'refused-by-db')", on: url)
        let refusedByTheDatabase = try await Self.queuedBehindTheHeldRow(
            store, url: url,
            [
                { try await store.addItem(cartID: "c", sku: "refused-by-db", quantity: 1, unitPriceCents: 1) },
                { try await store.addItem(cartID: "d", sku: "after", quantity: 1, unitPriceCents: 1) },
            ])
        #expect(refusedByTheDatabase == [1: .storeUnavailable])
        let log = try await wholeLog(store)
        #expect(log.map(\.seq) == Array(1...13), "one gap-free run: the refused changes took no seq")
        var replayed: [String: Cart] = [:]
        for event in log { replayed[event.cartID, default: Cart(id: event.cartID)].apply(event) }
        for id in ["c", "d", "e", "new"] {
            #expect(try await store.cart(id) == replayed[id], "cart \(id)")
        }
        let c = try await store.cart("c")
        #expect(c?.items.map(\.sku) == ["b", "c", "a"])
        #expect(c?.items.map(\.quantity) == [7, 1, 4])
        #expect(c?.items[1].name == "named")
        #expect(try await store.cart("d")?.items.map(\.sku) == ["y", "after"])
    }

    /// A change is planned on its cart as the batch reads it from the database (a row per
    /// cart, its lines as arrays): the cart it answers with is the stored one after it, lines
    /// in their order, names (and their absence, and an empty one) kept, with a line changed
    /// in the middle; another store's change is planned on it too.
    @Test func aChangeIsPlannedOnTheWholeStoredCart() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 10, name: "Apple")
        try await store.addItem(cartID: "c", sku: "b", quantity: 2, unitPriceCents: 20)
        try await store.addItem(cartID: "c", sku: "e", quantity: 1, unitPriceCents: 5, name: "")
        let other = try await PostgresCartStore.running(url: url)
        defer { try? other.close() }
        try await other.addItem(cartID: "c", sku: "d", quantity: 1, unitPriceCents: 40, name: "Date")
        let answered = try await store.addItem(cartID: "c", sku: "b", quantity: 3, unitPriceCents: 25, name: "Banana")
        #expect(answered.cart.items.map(\.sku) == ["a", "b", "e", "d"])
        #expect(answered.cart.items.map(\.name) == ["Apple", "Banana", "", "Date"])
        #expect(answered.cart.items.map(\.quantity) == [1, 5, 1, 1])
        #expect(answered.cart.version == 5)
        #expect(try await store.cart("c") == answered.cart)
        let next = try await store.addItem(cartID: "c", sku: "f", quantity: 1, unitPriceCents: 1)
        #expect(next.cart.items.map(\.name) == ["Apple", "Banana", "", "Date", nil])
        let cleared = try await other.clearCart(cartID: "c")
        #expect(cleared.cart.items.isEmpty)
        let again = try await store.addItem(cartID: "c", sku: "z", quantity: 1, unitPriceCents: 1)
        #expect(again.cart.items.map(\.sku) == ["z"], "a cart without lines reads as empty")
        #expect(again.cart.version == 8)
    }

    /// A cart's lines are planned on in the order they were added, wherever their rows lie:
    /// after a line is removed and the table vacuumed, the next line's row takes the freed
    /// place before the others'.
    @Test func linesKeepTheirOrderWhereverTheirRowsLie() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await PostgresCartStore.running(url: url)
        defer { try? store.close() }
        for sku in ["a", "b", "c"] { try await store.addItem(cartID: "o", sku: sku, quantity: 1, unitPriceCents: 1) }
        try await store.removeItem(cartID: "o", sku: "a")
        let server = try await SharedPostgres.shared.server()
        _ = try await server.psql("VACUUM cart_items", on: url)
        try await store.addItem(cartID: "o", sku: "d", quantity: 1, unitPriceCents: 1)
        let stored = try await server.psql("SELECT sku FROM cart_items WHERE cart_id = 'o' ORDER BY ctid", on: url)
        #expect(stored.split(separator: "\n") == ["d", "b", "c"], "the rows as stored: d took a's place")
        let answered = try await store.addItem(cartID: "o", sku: "e", quantity: 1, unitPriceCents: 1)
        #expect(answered.cart.items.map(\.sku) == ["b", "c", "d", "e"])
        #expect(try await store.cart("o")?.items.map(\.sku) == ["b", "c", "d", "e"])
    }

    /// Another server hears a batch from its notification when the events fit in one, and
    /// from the log when they do not (30 lines with 200-character names are far past 8 000
    /// bytes): either way every event once, in seq order, and the same events.
    @Test func anotherStoreGetsSmallAndLargeBatchesWholeAndInOrder() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let writer = try await PostgresCartStore.running(url: url)
        defer { try? writer.close() }
        let other = try await PostgresCartStore.running(url: url)
        defer { try? other.close() }
        let heard = RecordingObserver()
        other.observers.add(heard)
        let name = String(repeating: "n", count: 200)
        // Queued all at once (their order is no matter here): on a loaded machine, thirty
        // waits one after the other outlasted the held row's lock timeout.
        let big = try await Self.queuedBehindTheHeldRow(
            writer, url: url, inOrder: false,
            (0..<30).map { index in
                { try await writer.addItem(cartID: "big", sku: "s\(index)", quantity: 1, unitPriceCents: 1, name: name) }
            })
        let small = try await Self.queuedBehindTheHeldRow(
            writer, url: url, inOrder: false,
            (0..<3).map { index in
                { try await writer.addItem(cartID: "small", sku: "s\(index)", quantity: 1, unitPriceCents: 1) }
            })
        // Only the change that waited for the row alone may run out of time (its lock timeout).
        #expect(Set(big.keys).isSubset(of: [0]) && Set(small.keys).isSubset(of: [0]), "\(big) \(small)")
        let log = try await wholeLog(writer)
        #expect(log.filter { $0.cartID == "big" }.count == 30)
        #expect(log.filter { $0.cartID == "small" }.count == 3)
        await eventually("the other store has heard every batch") { heard.seqs.count >= log.count }
        #expect(heard.seqs == log.map(\.seq))
        #expect(heard.received == log)
    }

    /// Runs `changes` queued behind a change to cart `e` whose batch waits for the seq row,
    /// held by another session until they all wait: the batch is taken once the row is held,
    /// so they all commit in it. In the order given (each waits until the one before is
    /// queued), or, not `inOrder`, all at once. Returns the codes of those refused, by index (0
    /// is the change to `e`).
    private static func queuedBehindTheHeldRow(
        _ store: CartStore, url: String, inOrder: Bool = true, _ changes: [@Sendable () async throws -> CartCommit]
    ) async throws -> [Int: FanoutErrorCode?] {
        let holder = try await SeqRowHolder.hold(on: url)
        let first: @Sendable () async throws -> CartCommit = {
            try await store.addItem(cartID: "e", sku: "first", quantity: 1, unitPriceCents: 1)
        }
        var tasks: [Task<CartCommit, any Error>] = []
        for (index, change) in ([first] + changes).enumerated() {
            tasks.append(Task { try await change() })
            if index == 0 {
                // Its batch started, waiting for the row; the others queue behind it.
                await eventually("the first change's batch started") { store.backend.batchUnderWayFor != nil && store.waitingChanges == 1 }
            } else if inOrder {
                await eventually("change \(index) queued") { store.waitingChanges == index + 1 }
            }
        }
        if !inOrder { await eventually("every change queued") { store.waitingChanges == changes.count + 1 } }
        try await holder.release()
        var refused: [Int: FanoutErrorCode?] = [:]
        for (index, task) in tasks.enumerated() {
            do {
                _ = try await task.value
            } catch {
                refused[index] = CartStoreError.code(error)
            }
        }
        return refused
    }

    /// What `/healthz` asks says what a change meets: while another session holds the seq row
    /// (writes wait, then 503), the probe is refused too. It once said yes throughout, from a
    /// query on another pooled connection that needed no lock.
    @Test func theProbeSaysNoWhileChangesCannotBeWritten() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await answeringWithinTheDefaultDeadline(url)
        defer { try? store.close() }
        let holder = try await SeqRowHolder.hold(on: url)
        let write = Task { try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1) }
        await #expect { try await store.checkWritable() } throws: { CartStoreError.code($0) == .storeUnavailable }
        await #expect { try await write.value } throws: { CartStoreError.code($0) == .storeUnavailable }
        try await holder.release()
        await eventually("writable again once the row is free") { (try? await store.checkWritable()) != nil }
        await eventually("a change goes through") {
            (try? await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1)) != nil
        }
    }

    /// A table missing under the server (a restore or a migration running): changes and the
    /// health probe say no, without PostgreSQL's text (table names are the operator's, in the
    /// log and `lastProblem`); once the table is back, every change goes through. PostgresNIO
    /// remembers a failed preparation for the life of its session: before, every later change
    /// on those sessions failed with "relation does not exist", and the probe said yes.
    @Test func changesMadeWhileATableIsMissingFailAndGoThroughOnceItIsBack() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await answeringWithinTheDefaultDeadline(url)
        defer { try? store.close() }
        try await store.addItem(cartID: "c0", sku: "before", quantity: 1, unitPriceCents: 1)
        let server = try await SharedPostgres.shared.server()
        _ = try await server.psql("ALTER TABLE cart_items RENAME TO cart_items_away", on: url)
        for index in 0..<8 {
            await #expect {
                try await store.addItem(cartID: "c\(index)", sku: "a", quantity: 1, unitPriceCents: 1)
            } throws: { error in
                guard let error = error as? CartStoreError else { return false }
                return error.code == .storeUnavailable && !error.message.contains("cart_items")
                    && error.message.contains("nothing was written")
            }
        }
        await #expect { try await store.checkWritable() } throws: { error in
            CartStoreError.code(error) == .storeUnavailable && !"\(error)".contains("cart_items")
        }
        #expect(
            store.lastProblem?.message.contains("cart_items") == true,
            "the operator is told which table: \(String(describing: store.lastProblem))")

        _ = try await server.psql("ALTER TABLE cart_items_away RENAME TO cart_items", on: url)
        try await store.checkWritable()
        for index in 0..<20 {
            try await store.addItem(cartID: "c\(index % 8)", sku: "b\(index)", quantity: 1, unitPriceCents: 1)
        }
        #expect(try await store.latestSeq() == 21, "the change before, and the twenty after; none while the table was away")
    }

    /// A store on the default deadline (4 s), once the database answers it within that: on a
    /// loaded machine the suite's start kept the shared cluster from opening, migrating and
    /// answering a first probe within 4 s (`store_unavailable` before anything was tested),
    /// and that start is not what the deadline's tests are about. Waits for the database to
    /// answer in time, as a client retrying would.
    func answeringWithinTheDefaultDeadline(_ url: String) async throws -> CartStore {
        let store = NIOLockedValueBox<CartStore?>(nil)
        let lastError = NIOLockedValueBox<(any Error)?>(nil)
        await eventually(
            "a store whose database answers within \(PostgresCartStore.defaultDeadline)",
            explaining: { "last error: \(lastError.withLockedValue { $0 }.map { "\($0)" } ?? "none")" }
        ) {
            do {
                if store.withLockedValue({ $0 }) == nil {
                    let opened = try await PostgresCartStore.running(url: url, deadline: PostgresCartStore.defaultDeadline)
                    store.withLockedValue { $0 = opened }
                }
                try await store.withLockedValue({ $0 })?.checkWritable()
                return true
            } catch {
                lastError.withLockedValue { $0 = error }
                return false
            }
        }
        return try #require(store.withLockedValue { $0 })
    }

    /// With the database gone, what anyone may ask (`/healthz`) says "the database", never where
    /// it is; the operator's `lastProblem` (`/stats`) names it.
    @Test func aFailureNamesTheDatabaseOnlyToTheOperator() async throws {
        let postgres = try await PostgresServer.start()
        guard postgres.directory != nil else { return }  // FANOUT_POSTGRES_URL's server is not ours to stop
        let url = try await postgres.makeDatabase(named: "where_it_is")
        let store = try await answeringWithinTheDefaultDeadline(url)
        defer { try? store.close() }
        try await postgres.pause()
        let location = try #require(URLComponents(string: url))
        let attempts: [@Sendable () async throws -> Void] = [
            { try await store.checkWritable() },
            { _ = try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1) },
        ]
        for attempt in attempts {
            await #expect { try await attempt() } throws: { error in
                let message = "\(error)"
                return CartStoreError.code(error) == .storeUnavailable && message.contains("the database")
                    && !message.contains("postgres://") && !message.contains("where_it_is")
                    && !message.contains(":\(location.port ?? 5432)")
            }
        }
        let problem = try #require(store.lastProblem)
        #expect(problem.message.contains("where_it_is"), "\(problem.message)")
        await postgres.stop()
    }

    /// The session ends while its COMMIT runs: the caller is not told "nothing was written",
    /// which it cannot know, but that the change may or may not have been made.
    @Test func aCommitCutOffMidwayIsReportedAsUncertain() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        // 20 s: the test has that long to see the COMMIT under way and end its session (with the
        // default 4 s, a busy CI machine once missed the window).
        let store = try await PostgresCartStore.running(url: url, deadline: .seconds(20))
        defer { try? store.close() }
        let server = try await SharedPostgres.shared.server()
        // Work that runs at COMMIT: a deferred trigger that takes its time.
        _ = try await server.psql(
            "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$",
            "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON cart_events DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
            on: url)
        let write = Task { try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1) }
        let committing =
            "FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fanout' AND query LIKE 'COMMIT%' AND state = 'active'"
        await eventually("the commit under way") { (try? await server.psql("SELECT count(*) \(committing)", on: url)) == "1\n" }
        _ = try await server.psql("SELECT pg_terminate_backend(pid) \(committing)", on: url)
        await #expect { try await write.value } throws: { error in
            CartStoreError.code(error) == .storeUnavailable && "\(error)".contains("may or may not have been made")
        }
        _ = try await server.psql("DROP TRIGGER slow_commit ON cart_events", on: url)
        // Here it was not (the trigger never finished): the next change takes seq 1.
        #expect(try await store.cart("c") == nil)
        try await store.addItem(cartID: "c", sku: "b", quantity: 1, unitPriceCents: 1)
        #expect(try await wholeLog(store).map(\.seq) == [1])
    }
}

/// Where two sequences first differ (index, and each side's element there), or nil: a short
/// failure message for long lists.
func firstDifference<T: Equatable>(_ a: [T], _ b: [T]) -> String? {
    for index in 0..<max(a.count, b.count) {
        let left = index < a.count ? a[index] : nil
        let right = index < b.count ? b[index] : nil
        if left != right {
            return "at \(index): \(left.map { "\($0)" } ?? "end") vs \(right.map { "\($0)" } ?? "end") (\(a.count) vs \(b.count) elements)"
        }
    }
    return nil
}

extension PostgresStoreTests {
    /// The store's sessions ended again and again (`pg_terminate_backend`) while two writers
    /// write: every change is answered, made or `storeUnavailable`, within the README's bound,
    /// and changes go through again afterwards. What was acknowledged is in the log, once.
    @Test func sessionsKilledUnderWritersLeaveNoChangeUnanswered() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        let store = try await answeringWithinTheDefaultDeadline(url)
        defer { try? store.close() }
        let server = try await SharedPostgres.shared.server()
        let writers = TimedWriters(count: 2) { writer, index in
            do {
                // A new cart every 500 changes, never one full (1 000 lines) however fast the store.
                let cart = "w\(writer)-\(index / 500)"
                return .made(seq: try await store.addItem(cartID: cart, sku: "s\(index)", quantity: 1, unitPriceCents: 1).event.seq)
            } catch {
                return CartStoreError.code(error) == .storeUnavailable ? .unavailable : .other("\(error)")
            }
        }
        for _ in 0..<15 {
            try await Task.sleep(for: .milliseconds(400))
            _ = try await server.psql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fanout'",
                on: url)
            #expect(writers.longestWaitInFlight < TimedWriters.bound, "a change waits without an answer")
        }
        let outcome = await writers.stop()
        #expect(outcome.unanswered == 0, "every change answered (\(outcome))")
        #expect(outcome.longest < TimedWriters.bound, "answered within the bound (\(outcome))")
        #expect(outcome.otherAnswers.isEmpty, "only storeUnavailable: \(outcome.otherAnswers.prefix(3))")
        await eventually(timeout: .seconds(30), "a change to go through again") {
            (try? await store.addItem(cartID: "after", sku: "a", quantity: 1, unitPriceCents: 1)) != nil
        }
        let log = try await wholeLog(store).map(\.seq)
        #expect(log == Array(1...Int64(log.count)), "one gap-free log")
        #expect(Set(outcome.acknowledged).isSubset(of: Set(log)), "every acknowledged change is in the log")
        #expect(outcome.acknowledged.count == Set(outcome.acknowledged).count, "no seq acknowledged twice")
    }
}

/// Another session holding the seq row, as a server stuck in the middle of its commit: `BEGIN`,
/// the row `FOR UPDATE`, then a sleep far longer than any test, until `release()` ends it.
private struct SeqRowHolder {
    let url: String
    let server: PostgresServer
    let session: Task<Void, Never>
    static let holding = "FROM pg_stat_activity WHERE datname = current_database() AND query = 'SELECT pg_sleep(600)'"

    static func hold(on url: String) async throws -> SeqRowHolder {
        let server = try await SharedPostgres.shared.server()
        let session = Task {
            _ = try? await server.psql("BEGIN", "SELECT latest FROM event_seq FOR UPDATE", "SELECT pg_sleep(600)", "COMMIT", on: url)
        }
        await eventually("the row held") { (try? await server.psql("SELECT count(*) \(holding)", on: url)) == "1\n" }
        return SeqRowHolder(url: url, server: server, session: session)
    }

    /// Ends the session (its transaction with it) and waits until it has gone.
    func release() async throws {
        _ = try await server.psql("SELECT pg_terminate_backend(pid) \(Self.holding)", on: url)
        await session.value
    }
}

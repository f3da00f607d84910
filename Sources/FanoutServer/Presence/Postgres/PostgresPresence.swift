import CartStore
import CartStorePostgres
import FanoutProtocol
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// Presence shared by the servers (nodes) on one PostgreSQL database: each node writes the
/// members it holds, heartbeats, and hears what the other live nodes hold (`views`). A node
/// that stops its heartbeat for `nodeTimeout` is gone for the others, with its members.
///
/// A `Service`, run beside its store's (`PostgresCartStore`) and on its connections, as the
/// follower is: `set` and `remove` only note the wish (the newest per key replaces an older
/// one) and ring the writer, which writes everything pending in one transaction and notifies
/// `fanout_presence`; each node reads the whole table at once when another node notifies, and
/// every `heartbeatInterval` anyway. See docs/ARCHITECTURE.md and
/// Migrations/0004_presence.sql.
///
/// Timing on a healthy database: another node's view has a change within a write and a read
/// (milliseconds), or by its next poll (`heartbeatInterval`) if the notification was lost; a
/// dead node's members leave the others' views within `nodeTimeout` + `heartbeatInterval` of
/// its last heartbeat (between 4 and 6 s after it died, plus a read), as `"node_lost"`.
final class PostgresPresence: Service, Sendable {
    /// How often a node heartbeats, and reads the others' without being told: 1 s.
    static let heartbeatInterval: Duration = .seconds(1)
    /// How long a node may be silent before the others count it gone, with its members: 5 s.
    static let nodeTimeout: Duration = .seconds(5)

    private let store: PostgresCartStore
    private let node: String
    private let logger: Logger
    /// What this node holds and has yet to write: at most one wish per key (`PresenceWrites`).
    private let writes = NIOLockedValueBox(PresenceWrites())
    /// Rung by `set`, `remove` and every `heartbeatInterval`; the writer writes once per ring.
    /// One ring waits at most: rings during a write make one more write, of all pending by then.
    private let writeBell = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    /// Rung by another node's notification and every `heartbeatInterval`: one read in flight,
    /// one waiting at most.
    private let readBell = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    /// The newest view only: a slow reader skips intermediate ones.
    private let viewStream = AsyncStream<PresenceView>.makeStream(bufferingPolicy: .bufferingNewest(1))

    /// This node's presence on the database of `store`, which must run too (its pool carries
    /// the presence's statements).
    ///
    /// - Parameters:
    ///   - store: The store whose database and connections the presence uses.
    ///   - node: This server's id, unique among the nodes (a random UUID made at start).
    init(store: PostgresCartStore, node: String) {
        self.store = store
        self.node = node
        var logger = store.logger
        logger[metadataKey: "fanout.presence.node"] = "\(node)"
        self.logger = logger
    }

    /// This node holds `member` on `cart` from now on: a join, a state change, or a takeover
    /// of a key another node (or this one) held before (its row then names this node). Returns
    /// at once; written in the background.
    ///
    /// A member PostgreSQL cannot store (a NUL in one of its texts) is not held, and said in the
    /// log: in a batch it would fail every other member's write, and the node's heartbeat with
    /// them, until a restart. The server refuses such names where they enter (a token's `sub`,
    /// a presence key); this is the last guard.
    func set(_ member: PresenceMember, cart: String) {
        guard PresenceRow(member, cart: cart).isStorable else {
            logger.warning(
                "presence: a member PostgreSQL cannot store (a NUL in its text) is not shared", metadata: ["fanout.cart": "\(cart)"])
            return
        }
        writes.withLockedValue { $0.set(member, cart: cart) }
        writeBell.continuation.yield()
    }

    /// This node no longer holds member `id` of `cart`, for `reason` (the others see it in
    /// `departed`). Does nothing to a key another node holds now (taken over meanwhile).
    /// Returns at once; written in the background.
    func remove(_ id: PresenceMember.ID, cart: String, reason: PresenceLeaveReason) {
        // Never held (`set` turned it away), and unwritable.
        guard PresenceRow(cart: cart, user: id.user ?? "", member: id.member, state: "{}", since: 0).isStorable else { return }
        writes.withLockedValue { $0.remove(PresenceRegistry.Key(cart: cart, id), reason: reason) }
        writeBell.continuation.yield()
    }

    /// A new view each time what the other nodes hold changed (read at once when another node
    /// signals a change, and every `heartbeatInterval` anyway), the newest only: a slow reader
    /// skips intermediate views. The first comes as soon as `run()` has read the table; the
    /// stream finishes when `run()` returns. One reader: it is one stream.
    var views: AsyncStream<PresenceView> { viewStream.stream }

    /// Heartbeats this node, writes its changes, reads the others', and sweeps dead nodes'
    /// rows, until the task is cancelled, the service group shuts down, or the store is closed.
    /// Runs once. A database that fails or goes away is logged and retried every second; once
    /// it is back, everything this node holds is written again (also when the others swept this
    /// node's rows meanwhile). On a graceful shutdown the changes still pending (the leaves of
    /// the subscribers the server ended as it stopped) are written once more, within the
    /// store's deadline, so that the others hear their reasons; otherwise ending writes
    /// nothing, and the others count this node gone `nodeTimeout` after its last heartbeat, as
    /// they would if it had died.
    func run() async throws {
        defer { viewStream.continuation.finish() }
        let stopHearing = hearOthers()
        defer { stopHearing() }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.tick() }
                group.addTask { await self.writeChanges() }
                group.addTask { await self.readOthers() }
                // The first to end (the tick, when the store is closed; the others end only
                // when cancelled).
                _ = await group.next()
                group.cancelAll()
            }
        }
        // A task of its own: this one may be cancelled, and the write must still go out.
        if !store.isClosed, writes.withLockedValue({ $0.hasWork }) {
            await Task { try? await self.writePending() }.value
        }
    }

    /// Rings both bells now and every `heartbeatInterval`, until cancelled or the store closed.
    private func tick() async {
        while !Task.isCancelled, !store.isClosed {
            writeBell.continuation.yield()
            readBell.continuation.yield()
            try? await Task.sleep(for: Self.heartbeatInterval)
        }
    }

    // MARK: Writing

    /// Writes at each ring of `writeBell` (a heartbeat at the least), and sweeps every
    /// `heartbeatInterval`.
    private func writeChanges() async {
        var swept: ContinuousClock.Instant?
        await attempt(at: writeBell.stream, "write") {
            try await writePending()
            if swept.map({ .now - $0 >= Self.heartbeatInterval }) ?? true {
                try await sweep()
                swept = .now
            }
        }
    }

    /// Runs `body` at each ring of `bell` until cancelled. A failure is logged when failures
    /// start and when they end, not at each attempt, and the next attempt waits
    /// `heartbeatInterval` (rings meanwhile coalesce into one).
    private func attempt(at bell: AsyncStream<Void>, _ what: String, _ body: () async throws -> Void) async {
        var failing = false
        for await _ in bell {
            do {
                try await body()
                if failing {
                    failing = false
                    logger.notice("presence: \(what) again")
                }
            } catch {
                if Task.isCancelled { return }
                if !failing {
                    failing = true
                    logger.warning(
                        "presence: cannot \(what) (retrying every second)",
                        metadata: ["fanout.presence.problem": "\(PostgresCartStore.describe(error))"])
                }
                try? await Task.sleep(for: Self.heartbeatInterval)
            }
        }
    }

    /// One write: a heartbeat alone when nothing is pending (one statement), else the pending
    /// changes, or everything held, in one transaction with the heartbeat. A heartbeat that
    /// finds the node's row gone (swept while this node was cut off, or a crashed database)
    /// writes everything again.
    private func writePending() async throws {
        if writes.withLockedValue({ !$0.hasWork }) {
            let intact = try await store.execute(PresenceStatements.Heartbeat(node: node), logger: logger)
            if intact == [true] { return }
            writes.withLockedValue { $0.rewriteNext() }
        }
        let batch = writes.withLockedValue { $0.take() }
        do {
            try await write(batch)
        } catch {
            writes.withLockedValue { $0.putBack(batch) }
            throw error
        }
    }

    /// Writes `batch`, with the heartbeat, in one transaction (`PresenceStatements.Write`).
    private func write(_ batch: PresenceWrites.Batch) async throws {
        let node = self.node
        let logger = self.logger
        try await store.withConnection(until: .now + store.deadline) { connection in
            try await connection.withTransaction(logger: logger) { connection in
                var intact = false
                for try await row in try await connection.execute(PresenceStatements.Heartbeat(node: node), logger: logger) {
                    intact = row
                }
                let everything = batch.rewrite || !intact
                let (holds, leaves) = batch.rows(everything: everything)
                let write = PresenceStatements.Write(node: node, holds: holds, leaves: leaves, rewrite: everything)
                for try await _ in try await connection.execute(write, logger: logger) {}
            }
        }
    }

    /// Sweeps dead nodes' rows and forgets old departures (`PresenceStatements.Sweep`).
    private func sweep() async throws {
        let dead = try await store.execute(PresenceStatements.Sweep(), logger: logger).first ?? 0
        if dead > 0 { logger.notice("presence: nodes lost", metadata: ["fanout.presence.lost": "\(dead)"]) }
    }

    // MARK: Reading

    /// Hears `fanout_presence`, while `run` runs, through the store's LISTEN session
    /// (`PostgresBackend.listen`): rings `readBell` when another node wrote, and at each
    /// (re)connection (a notification may have been missed meanwhile).
    private func hearOthers() -> @Sendable () -> Void {
        let node = self.node
        let bell = readBell.continuation
        return store.listen(on: PresenceStatements.channel) { payload in
            // This node's own writes change nothing it reads.
            if payload != node { bell.yield() }
        }
    }

    /// Reads the others' rows at each ring of `readBell` (every second at least), and yields
    /// the view when they changed (the first always). The rows are compared as read: their
    /// states are decoded only for a view that changed, not every second for every member.
    private func readOthers() async {
        var last: Set<PresenceStatements.ReadRow>?
        await attempt(at: readBell.stream, "read") {
            let rows = try await store.execute(PresenceStatements.Read(node: node), logger: logger)
            let read = Set(rows)
            if read != last {
                last = read
                viewStream.continuation.yield(PresenceView(rows: rows))
            }
        }
    }
}

import CartStore
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// How a store on PostgreSQL hears of every commit, its own and other servers': it reads the
/// log after the last seq it delivered, in order, and delivers each event to the store's
/// observers, exactly as a local commit would be.
///
/// A commit NOTIFYs `fanout_events` with its batch's seqs and, when they fit, its events
/// (`BatchAnnouncement`): the log's rows as the same transaction wrote them. They are delivered
/// from the notification only when they are exactly the next ones; otherwise the notification
/// is a doorbell, and the log is read. Seqs are taken under one row lock held to commit, so
/// the committed seqs are a gap-free prefix at any moment, and reading "after the last one
/// delivered" can neither skip nor repeat. A missed notification, a dropped LISTEN connection
/// or a restarted PostgreSQL therefore lose nothing; a poll every `pollInterval` covers a
/// connection that went silent.
actor PostgresFollower {
    static let channel = "fanout_events"

    private let connections: PostgresConnections
    private let logger: Logger
    /// Where delivered events go: the store's observers (`PostgresBackend.start`).
    private nonisolated let sink = NIOLockedValueBox<EventSink?>(nil)
    /// The carts the batches plan on: every event delivered moves its cart there on.
    private let cache: CartCache
    /// The newest seq delivered to this store's observers.
    private(set) var delivered: Int64

    init(connections: PostgresConnections, deliveredThrough seq: Int64, cache: CartCache = CartCache(), logger: Logger) {
        self.connections = connections
        self.delivered = seq
        self.cache = cache
        self.logger = logger
    }

    nonisolated func attach(_ sink: EventSink) {
        self.sink.withLockedValue { $0 = sink }
    }

    /// A catch-up is under way: later callers wait for it, and it reads once more for them.
    private var catchingUp = false
    private var readAgain = false
    private var waiting: [CheckedContinuation<Void, any Error>] = []

    /// Reads and delivers everything committed after `delivered`, in pages, in seq order; when
    /// it returns, everything committed before it was called has been delivered. Each page is
    /// read within `PostgresConnections.timeout`, so a catch-up ends, and its waiters hear,
    /// however the database fails.
    ///
    /// One catch-up at a time: the actor is re-entered at every `await`, and two reads from the
    /// same `delivered` would deliver the same events twice. A call that finds one under way
    /// asks it to read once more and waits for it.
    func catchUp() async throws {
        if catchingUp {
            readAgain = true
            return try await withCheckedThrowingContinuation { waiting.append($0) }
        }
        catchingUp = true
        var failure: (any Error)?
        repeat {
            readAgain = false
            do {
                try await deliverCommitted()
            } catch {
                failure = error
                break
            }
        } while readAgain
        catchingUp = false
        let waiters = waiting
        waiting.removeAll()
        for waiter in waiters {
            if let failure { waiter.resume(throwing: failure) } else { waiter.resume() }
        }
        if let failure { throw failure }
    }

    private func deliverCommitted() async throws {
        let sink = self.sink.withLockedValue { $0 }
        while true {
            let page = try await connections.execute(ReadLog(after: delivered), logger: logger)
            for event in page {
                cache.apply(event)
                sink?.deliver(event)
                delivered = event.seq
            }
            if page.count < ReadLog.pageSize { return }
        }
    }

    /// A page of the log after a seq, in order; prepared once per connection.
    struct ReadLog: PostgresPreparedStatement {
        static let pageSize = 1_000
        static let sql = """
            SELECT \(CartEvent.storedColumns) FROM cart_events
            WHERE seq > $1 ORDER BY seq LIMIT \(pageSize)
            """
        let after: Int64
        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(after)
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws -> CartEvent {
            try .stored(row.decode(CartEvent.StoredRow.self))
        }
    }

    /// Delivers a batch this server has just committed, `events` with the seqs after
    /// `previous`: at once when everything up to `previous` has been delivered and no catch-up
    /// is reading (its read may hold them too), else by catching up from the log. Either way,
    /// when it returns (without a failure) the log through the batch has been delivered. The
    /// batch's own notification then finds nothing new (`catchUpQuietly(announced:)`).
    func deliverQuietly(_ events: [CartEvent], following previous: Int64) async {
        defer { ownBatch.withLockedValue { $0 = nil } }
        // A batch whose changes were all refused wrote nothing, but another server's batch
        // before it may be undelivered (and its notification skipped meanwhile).
        let last = events.last?.seq ?? previous
        guard last > delivered else { return }
        if events.isEmpty || !deliverIfNext(events, following: previous) { await catchUpQuietly() }
    }

    /// Delivers `events`, the seqs after `previous`, when they are exactly the next ones and no
    /// catch-up is reading (its read may hold them too); returns whether it did.
    private func deliverIfNext(_ events: [CartEvent], following previous: Int64) -> Bool {
        guard previous == delivered, !catchingUp, let last = events.last?.seq else { return false }
        let sink = self.sink.withLockedValue { $0 }
        for event in events {
            cache.apply(event)
            sink?.deliver(event)
        }
        delivered = last
        return true
    }

    /// The last seq of the batch this server is committing, from just before its COMMIT until
    /// it is delivered (`deliverQuietly`) or has failed (`ownBatchFailed`): a notification of a
    /// seq up to it is not read for, as the committer delivers everything through its batch.
    private nonisolated let ownBatch = NIOLockedValueBox<Int64?>(nil)
    /// The newest seq a notification announced while the own batch was committing.
    private var announcedMeanwhile: Int64 = 0

    /// Says that this server is about to COMMIT a batch ending at `seq`.
    nonisolated func committingOwnBatch(through seq: Int64) {
        ownBatch.withLockedValue { $0 = seq }
    }

    /// The own batch did not commit (or may not have): catches up if a notification came
    /// meanwhile.
    func ownBatchFailed() async {
        ownBatch.withLockedValue { $0 = nil }
        if announcedMeanwhile > delivered { await catchUpQuietly() }
    }

    /// A notification: its batch's events are delivered from it when they are the next ones
    /// and came with it (`BatchAnnouncement`); else the log is read, unless what it announces
    /// is delivered already or is this server's own batch.
    func heard(_ payload: String) async {
        guard let announcement = BatchAnnouncement(payload) else { return await catchUpQuietly() }
        // Decoded only when they would be delivered from here: not a batch delivered already,
        // nor one that does not follow what was delivered, nor this server's own (its
        // committer delivers it from memory, `deliverQuietly`; the notification can come first).
        // Another server's batch before the own one is delivered here even while the own one
        // commits: its notification is often late (the own batch took the seq row the moment
        // that batch committed), and skipped, it cost the committer a read of the log.
        let own = ownBatch.withLockedValue { $0 } == announcement.latest
        if announcement.latest > delivered, announcement.previous == delivered, !catchingUp, !own,
            let events = announcement.events(), deliverIfNext(events, following: delivered)
        {
            return
        }
        await catchUpQuietly(announced: announcement.latest)
    }

    /// Whether the last catch-up failed: failures are logged when they start and end, not at
    /// every poll while the database is away.
    private var failing = false

    /// Catches up, logging rather than throwing (for the doorbell and the poll). A notification
    /// says the seq its batch ended at (`announced`): nothing to read when that is delivered.
    func catchUpQuietly(announced: Int64? = nil) async {
        if let announced {
            if announced <= delivered { return }
            if let own = ownBatch.withLockedValue({ $0 }), announced <= own {
                announcedMeanwhile = max(announcedMeanwhile, announced)
                return
            }
        }
        do {
            try await catchUp()
            if failing {
                failing = false
                logger.notice("reading the event log again; delivered through seq \(delivered)")
            }
        } catch {
            if !Task.isCancelled, !failing {
                failing = true
                logger.warning("cannot read the event log to deliver it (retrying every second): \(PostgresBackend.describe(error))")
            }
        }
    }

    /// What the store's LISTEN session hears on `channel` (`PostgresBackend.listen`): a
    /// notification's payload, or `nil` once it listens (again): then it catches up.
    func heard(_ payload: String?) async {
        if let payload { await heard(payload) } else { await catchUpQuietly() }
    }

    /// Catches up every `interval` until cancelled: covers a notification that never came.
    nonisolated func poll(every interval: Duration) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            await catchUpQuietly()
        }
    }
}

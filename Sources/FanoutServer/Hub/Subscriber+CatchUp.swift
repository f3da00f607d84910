import CartStore
import NIOCore

/// Catch-up: from a subscription's start to the live ring.
///
/// A subscriber without `since` first gets a snapshot (in bounded parts) and its cursor becomes
/// the snapshot's seq; one with `since` starts with that cursor. Then, while the ring no longer
/// holds the event after its cursor, it reads the log after the cursor a page at a time and sends
/// it, waiting for each page to leave before reading the next (so a slow reader paces its own
/// catch-up, and at most one page waits in its connection). Once the ring covers the cursor it
/// joins its loop's `LoopFanout` and is live.
///
/// Why this is gap-free and duplicate-free: the store appends every committed event to the
/// ring, in seq order, right after its commit, so the ring always holds a contiguous run of seqs
/// up to the newest appended. Joining needs the ring to cover the cursor (`LiveRing.covers`):
/// every event after it is then in the ring or still to be appended, and the fan-out writes
/// only events after the cursor. A cursor past the ring's newest is checked against the log
/// first, which says whether it is ahead of the log (a snapshot then). An event committed but
/// not yet appended when the log was read is in the page (and the cursor past it); one appended
/// after the check reaches the ring. When the page leaves the cursor past the ring's newest (a
/// commit not yet delivered here, or, with PostgreSQL, another server's commits still on their
/// way), the catch-up waits for the ring to reach it instead of reading the log again and
/// again. Nothing waits in a queue of its own: the ring is the only buffer.
extension Subscriber {
    /// Starts the subscription, on the loop: `carts` (`nil`: all), after `since` or from a
    /// snapshot. Does nothing unless the subscriber is connected and not yet subscribed.
    func subscribe(carts: Set<String>?, since: Int64?) {
        guard phase == .connected, let framing = transport?.framing else { return }
        phase = .catchingUp
        self.carts = carts
        hub.subscribed(self)
        Task { await catchUp(Plan(carts: carts, framing: framing), since: since) }
    }

    /// What a catch-up reads and how it frames it.
    private struct Plan {
        let carts: Set<String>?
        let framing: WireFraming
    }

    private func catchUp(_ plan: Plan, since: Int64?) async {
        do {
            var cursor: Int64
            if let since {
                cursor = since
            } else {
                cursor = try await sendSnapshot(.initial, plan)
            }
            while true {
                let reached = cursor
                if try await loop.submit({ try self.goLiveIfCovered(after: reached) }).get() { break }
                cursor = try await sendPage(after: reached, plan)
                if cursor > hub.ring.newestSeq {
                    // The log is ahead of this server's ring: its commits are on their way
                    // here. Wait for them rather than read the log again at once (a second at
                    // most, then the log is read again).
                    _ = await hub.aheadOfRing.park(after: cursor - 1, until: .now + .seconds(1))
                }
            }
        } catch is SubscriberEnded {
            // Ended meanwhile (closed, expired, shut down): nothing more to send.
        } catch {
            hub.logger.withSubscriber(id).warning("catch-up failed", metadata: ["fanout.error": "\(error)"])
            end(.failed)
        }
    }

    /// On the loop: joins the live fan-out if the ring holds everything after `cursor`.
    private func goLiveIfCovered(after cursor: Int64) throws -> Bool {
        guard phase == .catchingUp else { throw SubscriberEnded() }
        self.cursor = cursor
        guard hub.ring.covers(cursor) else { return false }
        phase = .live
        hub.wentLive(self)
        hub.fanout(for: loop).add(self)
        return true
    }

    /// Sends the page of the log after `cursor`; returns the new cursor.
    private func sendPage(after cursor: Int64, _ plan: Plan) async throws -> Int64 {
        let pageSize = hub.settings.catchUpPageSize
        let read: EventLogRead
        do {
            read = try await hub.store.events(after: cursor, limit: pageSize, carts: plan.carts)
        } catch let error as CartStoreError where error.code == .sinceAhead {
            return try await sendSnapshot(.sinceAhead, plan)
        }
        switch read {
        case .tooOld:
            return try await sendSnapshot(.sinceTooOld, plan)
        case .events(let events, let latest):
            try await send(events.map { plan.framing.frame(ServerEncoding.event($0)) })
            // A short page is the whole log (of these carts) as of the read.
            guard events.count == pageSize, let last = events.last else { return max(events.last?.seq ?? cursor, latest) }
            return last.seq
        }
    }

    /// Sends a snapshot of the subscribed carts in bounded parts; returns its seq.
    private func sendSnapshot(_ reason: SnapshotReason, _ plan: Plan) async throws -> Int64 {
        let snapshot = try await hub.store.snapshot(of: plan.carts)
        for part in SnapshotParts.encode(snapshot, reason: reason) {
            try await send([plan.framing.frame(part)])
        }
        return snapshot.seq
    }

    /// Writes `frames` and waits until they have left; throws `SubscriberEnded` once it ended.
    private func send(_ frames: [ByteBuffer]) async throws {
        guard !frames.isEmpty else { return }
        try await loop.flatSubmit {
            guard self.phase == .catchingUp, let transport = self.transport else {
                return self.loop.makeFailedFuture(SubscriberEnded())
            }
            for frame in frames.dropLast() { transport.write(frame) }
            return transport.writeAndFlush(frames[frames.count - 1])
        }.flatMapErrorThrowing { error in
            // A write fails when the connection closed: that ends the subscriber by itself.
            throw error is SubscriberEnded ? error : SubscriberEnded()
        }.get()
    }

}

/// The subscriber ended while a catch-up was under way.
struct SubscriberEnded: Error {}

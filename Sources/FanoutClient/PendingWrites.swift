import FanoutProtocol
import Foundation

/// What the task that sends a store's pending writes is doing: said by `debugDescription`.
enum WriteSending: Sendable, CustomStringConvertible {
    case idle
    /// Sending write `id`, since `since`, after `failures` failed tries (the last: `error`).
    case sending(id: String, since: ContinuousClock.Instant, failures: Int, error: String?)
    /// Waiting before it sends again, after `failures` failed tries (the last: `error`).
    case pausing(failures: Int, error: String)

    var description: String {
        switch self {
        case .idle: "idle"
        case .sending(let id, let since, let failures, let error):
            "sending \(id) for \(since.duration(to: .now))\(failures > 0 ? " after \(failures) failed tries (\(error ?? ""))" : "")"
        case .pausing(let failures, let error): "pausing after \(failures) failed tries (\(error))"
        }
    }
}

/// The replica's writes that the server has not confirmed, in the order they were made.
struct PendingWrites {
    struct Entry {
        var write: PendingWrite
        /// The seq of its event, once the server answered; it stays shown on top of the
        /// confirmed carts until the replica has applied that seq.
        var answeredSeq: Int64?
    }

    private(set) var entries: [Entry] = []
    /// What the sending task does now.
    var sending = WriteSending.idle
    /// The outcomes of the last writes that ended, oldest first (at most `rememberedOutcomes`).
    private var outcomes: [String: WriteOutcome] = [:]
    private var outcomeOrder: [String] = []
    /// Writes ended since the cache file was last told (`takeEnded`).
    private var endedUnsaved: [String] = []
    /// Who waits for a write's outcome, by its id.
    var waiting: [String: [CheckedContinuation<WriteOutcome, Never>]] = [:]

    var count: Int { entries.count }

    func of(_ cartID: String) -> [PendingWrite] {
        entries.lazy.filter { $0.write.cartID == cartID }.map(\.write)
    }

    /// The first write not yet answered: the one to send.
    var next: PendingWrite? {
        entries.first { $0.answeredSeq == nil }?.write
    }

    mutating func append(_ write: PendingWrite) {
        entries.append(Entry(write: write))
    }

    mutating func answer(_ id: String, seq: Int64) -> PendingWrite? {
        guard let index = entries.firstIndex(where: { $0.write.id == id }) else { return nil }
        entries[index].answeredSeq = seq
        return entries[index].write
    }

    /// Ends `id` with `outcome`: no longer pending, its waiters resumed.
    @discardableResult
    mutating func end(_ id: String, _ outcome: WriteOutcome) -> PendingWrite? {
        guard let index = entries.firstIndex(where: { $0.write.id == id }) else { return nil }
        let ended = entries.remove(at: index).write
        endedUnsaved.append(id)
        outcomes[id] = outcome
        outcomeOrder.append(id)
        if outcomeOrder.count > RemoteCartStore.rememberedOutcomes {
            outcomes[outcomeOrder.removeFirst()] = nil
        }
        for waiter in waiting.removeValue(forKey: id) ?? [] { waiter.resume(returning: outcome) }
        return ended
    }

    /// Ends every answered write of `cartID` whose event the replica has applied (its seq at or
    /// below `appliedSeq`, or the event carrying its key); returns whether any ended.
    mutating func settle(_ cartID: String, appliedSeq: Int64, confirmedKey: String? = nil) -> Bool {
        let done = entries.filter { entry in
            guard entry.write.cartID == cartID else { return false }
            if let key = confirmedKey, entry.write.id == key { return true }
            return entry.answeredSeq.map { $0 <= appliedSeq } ?? false
        }
        for entry in done { end(entry.write.id, .confirmed(seq: entry.answeredSeq ?? appliedSeq)) }
        return !done.isEmpty
    }

    /// The writes ended since the last call.
    mutating func takeEnded() -> [String] {
        defer { endedUnsaved = [] }
        return endedUnsaved
    }

    func outcome(of id: String) -> WriteOutcome? {
        entries.contains { $0.write.id == id } ? nil : (outcomes[id] ?? .unknown)
    }

    /// Every waiter resumed with `unknown`: the store closed.
    mutating func abandonWaiters() {
        for (_, waiters) in waiting {
            for waiter in waiters { waiter.resume(returning: .unknown) }
        }
        waiting = [:]
    }
}

extension Replica {
    /// A write made through the store: shown at once to the observers of its cart, then sent.
    /// Queued to the file in order with the replica's other changes; returns the file and the
    /// change's number, to wait (outside the lock) until it is synced.
    func addPending(_ write: PendingWrite, observers: RemoteCartStore.Observers) throws(RemoteStoreError) -> (ReplicaFile, Int)? {
        try withLock { () throws(RemoteStoreError) in
            guard !state.lifecycle.closed else { throw RemoteStoreError.storeClosed }
            guard state.pending.count < RemoteCartStore.maxPendingWrites else {
                throw RemoteStoreError.tooManyPendingWrites(RemoteCartStore.maxPendingWrites)
            }
            state.pending.append(write)
            let saving = file.map { ($0, $0.addPending(write)) }
            tellPending(of: write.cartID, observers: observers)
            return saving
        }
    }

    /// What the sending task does now.
    func sending(_ sending: WriteSending) {
        withLock { state.pending.sending = sending }
    }

    /// The next write to send, in the order they were made.
    var nextPendingWrite: PendingWrite? {
        read(\.pending.next)
    }

    /// The server committed `id` as `seq`. It stays shown on top of the confirmed cart until
    /// the replica applies that seq, unless the replica does not follow the cart.
    func answered(_ id: String, seq: Int64, observers: RemoteCartStore.Observers) {
        withLock {
            guard let write = state.pending.answer(id, seq: seq) else { return }
            if !state.held.holds(write.cartID) || state.held.seq >= seq {
                state.pending.end(id, .confirmed(seq: seq))
                tellPending(of: write.cartID, observers: observers)
            }
        }
    }

    /// The server refused `id` for good: rolled back, its observers told.
    func rejected(_ id: String, because error: RemoteStoreError, observers: RemoteCartStore.Observers) {
        withLock {
            guard let write = state.pending.end(id, .rejected(error)) else { return }
            if !state.lifecycle.closed, let store = store.withLockedValue(\.store) {
                observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(write.cartID) }) { observer, _ in
                    observer.cartSource(store, didReject: write, because: error)
                }
            }
            tellPending(of: write.cartID, observers: observers)
        }
    }

    /// After the confirmed state of `cartID` changed (an event, a snapshot): ends the pending
    /// writes it confirms, and tells the observers what to show if it had any. Under the lock.
    func settlePending(of cartID: String, confirmedKey: String? = nil, observers: RemoteCartStore.Observers) {
        let had = !state.pending.of(cartID).isEmpty
        _ = state.pending.settle(cartID, appliedSeq: state.held.seq, confirmedKey: confirmedKey)
        if had { tellPending(of: cartID, observers: observers) }
    }

    /// Every cart with pending writes, settled (after a snapshot). Under the lock.
    func settleAllPending(observers: RemoteCartStore.Observers) {
        for cartID in Set(state.pending.entries.map(\.write.cartID)) {
            settlePending(of: cartID, observers: observers)
        }
    }

    /// Tells the observers of `cartID` its pending writes and the cart to show. Under the lock.
    func tellPending(of cartID: String, observers: RemoteCartStore.Observers) {
        for id in state.pending.takeEnded() { file?.removePending(id) }
        guard !state.lifecycle.closed, let store = store.withLockedValue(\.store) else { return }
        let pending = state.pending.of(cartID)
        let shown = state.held.shown(cartID, with: pending)
        observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
            observer.cartSource(store, didChangePending: pending, showing: shown)
        }
    }

    /// Tells one newly loaded observer the pending writes of its carts. Under the lock.
    func tellPending(to observer: any CartObserver, _ interest: ObserverInterest, in set: ObserverSetOfStore) {
        guard let store = store.withLockedValue(\.store) else { return }
        for cartID in Set(state.pending.entries.map(\.write.cartID)).sorted() where interest.selection.contains(cartID) {
            let pending = state.pending.of(cartID)
            let shown = state.held.shown(cartID, with: pending)
            set.notify(only: observer) { $0.cartSource(store, didChangePending: pending, showing: shown) }
        }
    }

    /// Waits for what becomes of write `id`.
    func outcome(of id: String) async -> WriteOutcome {
        await withCheckedContinuation { continuation in
            withLock {
                if let known = state.pending.outcome(of: id) {
                    continuation.resume(returning: known)
                } else if state.lifecycle.closed {
                    continuation.resume(returning: .unknown)
                } else {
                    state.pending.waiting[id, default: []].append(continuation)
                }
            }
        }
    }

    /// Waits until the replica has applied every event up to `seq` (or the store closed).
    func applied(through seq: Int64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            withLock {
                if state.lifecycle.closed || (state.held.loaded && state.held.seq >= seq) {
                    continuation.resume()
                } else {
                    state.seqWaiters.add(continuation, for: seq)
                }
            }
        }
    }

    /// Resumes those waiting for a seq the replica has reached. Under the lock.
    func resumeSeqWaiters() {
        let reached = state.lifecycle.closed ? Int64.max : (state.held.loaded ? state.held.seq : Int64.min)
        for waiter in state.seqWaiters.reached(reached) { waiter.resume() }
    }
}

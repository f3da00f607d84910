import Synchronization

extension CartStore {
    /// Committed events as an `AsyncSequence`: first the log after `since`, then live events.
    ///
    /// Seqs are strictly increasing with no gap and no duplicate across the backlog/live
    /// boundary. Memory is bounded: the backlog is read from the log a page at a time, and at
    /// most `bufferLimit` live events wait for a slow consumer. When that buffer is full the
    /// stream does not block the store and does not lose events: it drops its buffer and reads
    /// them back from the durable log, then goes live again.
    ///
    /// Iteration throws `historyTooOld` when the events it needs were pruned (take a snapshot),
    /// and `sinceAhead` when `since` is newer than the log.
    ///
    /// - Parameters:
    ///   - since: the last seq already seen; `nil` starts after the newest event at the first
    ///     call to `next()`.
    ///   - carts: only events of these carts; `nil` for all.
    ///   - bufferLimit: live events held for a consumer that is behind (at least 1).
    public func eventStream(since: Int64? = nil, carts: Set<String>? = nil, bufferLimit: Int = 1_024) -> CartEventStream {
        CartEventStream(store: self, since: since, carts: carts, bufferLimit: max(1, bufferLimit))
    }
}

/// See `CartStore.eventStream(since:carts:bufferLimit:)`.
public struct CartEventStream: AsyncSequence, Sendable {
    public typealias Element = CartEvent

    let store: CartStore
    let since: Int64?
    let carts: Set<String>?
    let bufferLimit: Int

    public func makeAsyncIterator() -> Iterator {
        Iterator(store: store, since: since, carts: carts, bufferLimit: bufferLimit)
    }

    public struct Iterator: AsyncIteratorProtocol {
        private let store: CartStore
        private let carts: Set<String>?
        private let pageSize: Int
        private let tap: LiveTap
        private var lastSeq: Int64?
        private var page: [CartEvent] = []
        private var pageIndex = 0
        /// Reading from the log rather than the live buffer (at start, and after an overflow).
        private var catchingUp = true

        init(store: CartStore, since: Int64?, carts: Set<String>?, bufferLimit: Int) {
            self.store = store
            self.carts = carts
            self.pageSize = Swift.min(bufferLimit, CartStore.maxEventPage)
            self.lastSeq = since
            self.tap = LiveTap(carts: carts, limit: bufferLimit)
            // Held weakly by the store: when this iterator goes away, so does the tap.
            store.observers.add(tap)
        }

        public mutating func next() async throws -> CartEvent? {
            while true {
                try Task.checkCancellation()
                if pageIndex < page.count {
                    let event = page[pageIndex]
                    pageIndex += 1
                    lastSeq = event.seq
                    return event
                }
                if catchingUp {
                    try await readPage()
                    continue
                }
                switch await tap.next() {
                case .event(let event):
                    if let lastSeq, event.seq <= lastSeq { continue }  // already read from the log
                    lastSeq = event.seq
                    return event
                case .overflowed:
                    catchingUp = true
                case .cancelled:
                    throw CancellationError()
                }
            }
        }

        /// Reads the next page of the log. Live events that arrive meanwhile are buffered by the
        /// tap, which is emptied first: everything it had is in the log too.
        private mutating func readPage() async throws {
            tap.reset()
            guard let after = lastSeq else {
                lastSeq = try await store.latestSeq()
                catchingUp = false
                return
            }
            switch try await store.events(after: after, limit: pageSize, carts: carts) {
            case .events(let events, _):
                page = events
                pageIndex = 0
                // A short page is the whole log as of the read; later commits reach the tap.
                catchingUp = events.count == pageSize
            case .tooOld(let oldest, _):
                throw CartStoreError(
                    .historyTooOld,
                    "events after \(after) were pruned (oldest retained: \(oldest)); take a snapshot")
            }
        }
    }
}

/// The observer behind a `CartEventStream`: a bounded buffer of live events.
///
/// When the buffer is full it stops buffering and says `overflowed` once: the stream then reads
/// what it missed from the log. The writer never waits for the consumer.
final class LiveTap: CartStoreObserver {
    enum Next: Sendable {
        case event(CartEvent)
        case overflowed
        case cancelled
    }

    private struct State {
        var buffer: [CartEvent] = []
        var head = 0
        var overflowed = false
        var waiter: CheckedContinuation<Next, Never>?
        var cancelled = false

        var isEmpty: Bool { head == buffer.count }

        mutating func take() -> Next? {
            if overflowed {
                overflowed = false
                return .overflowed
            }
            if cancelled { return .cancelled }
            guard !isEmpty else { return nil }
            let event = buffer[head]
            head += 1
            if isEmpty {
                buffer.removeAll(keepingCapacity: true)
                head = 0
            }
            return .event(event)
        }
    }

    private let carts: Set<String>?
    private let limit: Int
    private let state = Mutex(State())

    init(carts: Set<String>?, limit: Int) {
        self.carts = carts
        self.limit = limit
    }

    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        if let carts, !carts.contains(event.cartID) { return }
        let handoff: (CheckedContinuation<Next, Never>, Next)? = state.withLock { state in
            if state.overflowed { return nil }
            if state.buffer.count - state.head >= limit {
                // Full: stop buffering; the consumer reads what it missed from the log.
                state.buffer.removeAll()
                state.head = 0
                state.overflowed = true
            } else {
                state.buffer.append(event)
            }
            guard let waiter = state.waiter, let next = state.take() else { return nil }
            state.waiter = nil
            return (waiter, next)
        }
        if let (waiter, next) = handoff {
            waiter.resume(returning: next)
        }
    }

    /// Forgets buffered events and any overflow: the caller is about to read the log.
    func reset() {
        state.withLock { state in
            state.buffer.removeAll(keepingCapacity: true)
            state.head = 0
            state.overflowed = false
        }
    }

    /// The next live event, waiting for one if needed.
    func next() async -> Next {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready: Next? = state.withLock { state in
                    if let next = state.take() { return next }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                state.cancelled = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: .cancelled)
        }
    }
}

import DequeModule
import NIOConcurrencyHelpers
import NIOCore

/// Why a subscriber's connection ends from the server's side.
enum CloseReason: Sendable, Equatable {
    /// No client message within the lease TTL.
    case leaseExpired
    /// The outbox overflowed: the client reads too slowly.
    case tooSlow
    /// The server is shutting down.
    case shuttingDown
    /// The client closed the connection or broke the protocol; nothing more to send.
    case connectionEnded
}

/// A message ready for the wire: encoded once and shared by every subscriber it goes to
/// (`ByteBuffer` is copy-on-write, so queuing it anywhere copies no bytes).
struct OutboundFrame: Sendable {
    /// The event's seq, for events; lets a subscriber skip what its backlog already sent.
    var seq: Int64?
    var text: ByteBuffer
}

/// What a subscriber's writer takes from its outbox.
enum OutboxItem: Sendable {
    /// The subscription starts: send the snapshot or the backlog, then what follows.
    case start(since: Int64?, carts: Set<String>?)
    case frame(OutboundFrame)
}

/// The bounded queue between the hub (producer, on the store's writer thread) and one
/// subscriber's WebSocket writer (consumer).
///
/// When it is full, `enqueue` refuses, the outbox closes with `.tooSlow`, and the connection
/// closes: the store and the other subscribers never wait for a slow one, and the
/// client resumes from the durable log with `since`.
final class Outbox: Sendable {
    enum Next: Sendable {
        case item(OutboxItem)
        case closed(CloseReason)
    }

    private struct State {
        var items = Deque<OutboxItem>()
        var closed: CloseReason?
        var waiter: CheckedContinuation<Next, Never>?
        /// Tells the connection, which no task watches, to close.
        var onClose: (@Sendable (CloseReason) -> Void)?
        /// Served from the `LiveRing` (set once by `goLive`).
        var live = false
    }

    /// What happened to a frame offered to the outbox.
    enum Admission {
        /// Queued for the subscriber's writer (it is still sending its snapshot or backlog).
        case queued
        /// The subscriber is live: its event loop writes it from the `LiveRing`.
        case live
        /// Closed, or full (and so now closed as too slow).
        case refused
    }

    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// Queues a frame. Returns false, and closes the outbox as too slow, when it is full;
    /// returns false without effect when it is already closed.
    @discardableResult
    func enqueue(_ item: OutboxItem) -> Bool {
        offer(item) == .queued
    }

    /// Offers a frame: queued while the subscriber catches up, `.live` once it has.
    func admit(_ frame: OutboundFrame) -> Admission {
        offer(.frame(frame))
    }

    private func offer(_ item: OutboxItem) -> Admission {
        typealias Outcome = (Admission, CheckedContinuation<Next, Never>?, overflowed: (@Sendable (CloseReason) -> Void)?)
        let (admission, waiter, overflowed): Outcome = state.withLockedValue { state in
            if state.closed != nil { return (.refused, nil, nil) }
            // Only for an instant: once live, the hub stops offering it events.
            if state.live { return (.live, nil, nil) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (.queued, waiter, nil)
            }
            guard state.items.count < limit else {
                // Full: closed as too slow, like `close(.tooSlow)` (no writer waits: the
                // waiter case is above), and the connection is told through `onClose`.
                state.items.removeAll()
                state.closed = .tooSlow
                defer { state.onClose = nil }
                return (.refused, nil, state.onClose)
            }
            state.items.append(item)
            return (.queued, nil, nil)
        }
        waiter?.resume(returning: .item(item))
        overflowed?(.tooSlow)
        return admission
    }

    /// Switches to live delivery if nothing is queued. The writer calls it after draining;
    /// false means more frames arrived meanwhile and must be drained first. Once it returns
    /// true, every later event reaches the subscriber from the `LiveRing` instead.
    func goLive() -> Bool {
        state.withLockedValue { state in
            guard state.items.isEmpty, state.closed == nil else { return false }
            state.live = true
            return true
        }
    }

    /// Sets what to call when the outbox closes (lease expired, too slow, shutdown, connection
    /// ended), on whichever thread closes it; at once if it is closed already. The connection
    /// closes itself through it: no task waits on an idle subscriber's outbox.
    ///
    /// The outbox holds `onClose` until it closes, so it may capture the connection that owns
    /// this outbox: closing breaks the cycle.
    func onClose(_ onClose: @escaping @Sendable (CloseReason) -> Void) {
        let closed: CloseReason? = state.withLockedValue { state in
            if let reason = state.closed { return reason }
            state.onClose = onClose
            return nil
        }
        if let closed { onClose(closed) }
    }

    /// Closes the outbox: queued frames are dropped and the writer learns `reason` next.
    /// The first reason wins.
    func close(_ reason: CloseReason) {
        let (waiter, onClose) = state.withLockedValue { state -> (CheckedContinuation<Next, Never>?, (@Sendable (CloseReason) -> Void)?) in
            guard state.closed == nil else { return (nil, nil) }
            state.closed = reason
            state.items.removeAll()
            defer {
                state.waiter = nil
                state.onClose = nil
            }
            return (state.waiter, state.onClose)
        }
        waiter?.resume(returning: .closed(reason))
        onClose?(reason)
    }

    var closedReason: CloseReason? { state.withLockedValue { $0.closed } }

    var count: Int { state.withLockedValue { $0.items.count } }

    /// The next frame, waiting for one; `.closed` once closed. One consumer at a time.
    func next() async -> Next {
        await withCheckedContinuation { continuation in
            let ready: Next? = state.withLockedValue { state in
                if let reason = state.closed { return .closed(reason) }
                if let item = state.items.popFirst() { return .item(item) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

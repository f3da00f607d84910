import DequeModule
import NIOConcurrencyHelpers

/// Calls to observers decided under a lock and made after it is released, in the order they
/// were decided: what lets a source hold its state under a lock without ever running an
/// observer's code under it.
///
/// A `WeakObserverSet` made with one (`init(deferringCallsTo:)`) appends its synchronous
/// deliveries here instead of making them (deliveries on an observer's queue are dispatched as
/// before: no observer code runs in the dispatch). The source, having released its lock, calls
/// `run()`: the calls are made on that thread, or, if another thread is already making them,
/// by that thread, after the ones before them. One thread at a time makes them, so each
/// observer is called in the order its notifications were decided, never two at once.
///
/// Bounded: a producer that may decide calls faster than a slow observer takes them (a
/// connection's events) waits for `room()` before it decides more; the calls already decided
/// are never dropped. An observer may call back into its source from its callback: what that
/// decides is appended, and made after the call under way returns.
public final class DeferredCalls: Sendable {
    public typealias Call = @Sendable () -> Void

    private struct State {
        var calls = Deque<Call>()
        /// A thread is making the calls (`run`).
        var running = false
        /// Producers waiting for the backlog to fall below `limit`.
        var waitingForRoom: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())
    /// The backlog past which `room()` waits.
    public let limit: Int

    public init(limit: Int = 1_024) {
        self.limit = limit
    }

    /// Appends `call`, to be made by the next `run()` (or the one under way).
    public func append(_ call: @escaping Call) {
        state.withLockedValue { $0.calls.append(call) }
    }

    /// Makes the calls appended so far, and those appended while they are made, on this thread;
    /// returns at once if another thread is making them (it makes these too). Call it with no
    /// lock held.
    public func run() {
        let claimed = state.withLockedValue { state in
            guard !state.running, !state.calls.isEmpty else { return false }
            state.running = true
            return true
        }
        guard claimed else { return }
        while true {
            let (call, roomMade) = state.withLockedValue { state -> (Call?, [CheckedContinuation<Void, Never>]) in
                let call = state.calls.popFirst()
                if call == nil { state.running = false }
                guard !state.waitingForRoom.isEmpty, state.calls.count < limit else { return (call, []) }
                defer { state.waitingForRoom = [] }
                return (call, state.waitingForRoom)
            }
            for waiter in roomMade { waiter.resume() }
            guard let call else { return }
            call()
        }
    }

    /// Returns once fewer than `limit` calls wait: at once, unless an observer is that far
    /// behind.
    public func room() async {
        guard state.withLockedValue({ $0.calls.count >= limit }) else { return }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let hasRoom = state.withLockedValue { state in
                guard state.calls.count >= limit else { return true }
                state.waitingForRoom.append(waiter)
                return false
            }
            if hasRoom { waiter.resume() }
        }
    }

    /// How many calls wait.
    public var backlog: Int {
        state.withLockedValue { $0.calls.count }
    }

    /// How many producers wait for `room()`.
    public var producersWaiting: Int {
        state.withLockedValue { $0.waitingForRoom.count }
    }
}

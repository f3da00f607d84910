import FanoutProtocol
import NIOConcurrencyHelpers
import Synchronization

/// An event stream whose presence state changes, or whose signed token expires, while it runs.
/// An event stream cannot send anything, so each change opens a stream with the new state (same
/// key) or the provider's fresh token, and the old stream is closed only once the new one has
/// joined: with presence, once it is a member (its first presence message came: the server has
/// then made the new one take the membership over, so the others see a state change, never a
/// leave and a join; a stream the server sees close is a leave at once, and its welcome comes
/// before it joins); without, once it is welcomed.
///
/// One stream hands messages on at a time: the new one, once it joined, waits until the old
/// one has ended; it resumes after the last seq handed on, and events the old one handed on
/// meanwhile are not handed on twice (`DeliveredSeq`).
struct EventStreamHandover {
    let subscription: FanoutSubscription
    /// The token of the first stream.
    let token: String?
    let received: Counter
    /// The presence state to follow, for a plan with presence.
    let presenceStates: PresenceStates?
    let handle: @Sendable (FanoutSubscription.Update) async throws -> Void

    /// What the handover's loop hears. Few ever wait: at most one `changed` (state changes
    /// are told once until the loop takes the state), one `fresh` a token's life, and two per
    /// stream.
    private enum Signal {
        case changed
        case fresh(String)
        case joined(Int)
        case ended(Int)
    }

    /// A stream of the handover: its plan and token, its task, and what lets it hand messages on.
    private struct Open {
        let id: Int
        let plan: FanoutSubscription.Plan
        let token: String?
        let task: Task<Void, any Error>
        let go: AsyncStream<Void>.Continuation
    }

    /// Runs streams for `first` and its state changes until one ends, or the task is cancelled.
    func run(_ first: FanoutSubscription.Plan) async throws {
        let (signals, signal) = AsyncStream<Signal>.makeStream()
        let delivered = DeliveredSeq(first.since)
        let states = presenceStates
        let changeWaiting = NIOLockedValueBox(false)
        let forwarder = Task {
            guard let states else { return }
            while !Task.isCancelled {
                await states.changes.next()
                let waiting = changeWaiting.withLockedValue { waiting in
                    defer { waiting = true }
                    return waiting
                }
                if !waiting { signal.yield(.changed) }
            }
        }
        // The provider's next token, a while before the current one expires.
        let credentials = subscription.api.credentials
        let refresher = Task { [token] in
            guard var current = token, var expiry = Credentials.expiry(of: current) else { return }
            while true {
                try await Task.sleep(for: Credentials.refreshDelay(until: expiry))
                guard let fresh = try await credentials.fresher(than: current, expiring: expiry) else { return }
                signal.yield(.fresh(fresh))
                guard let next = Credentials.expiry(of: fresh) else { return }
                (current, expiry) = (fresh, next)
            }
        }
        var token = self.token
        var ids = 0
        func open(_ plan: FanoutSubscription.Plan, waiting: Bool) -> Open {
            ids += 1
            let id = ids
            let (gate, go) = AsyncStream<Void>.makeStream()
            if !waiting { go.finish() }
            let reader = MessageReader(handle: handle, received: received, presenceAsked: plan.presence != nil, delivered: delivered)
            let task = Task { [subscription, token] in
                defer { signal.yield(.ended(id)) }
                try await subscription.stream(plan, token: token, reader: reader) {
                    signal.yield(.joined(id))
                    for await _ in gate {}
                    try Task.checkCancellation()
                }
            }
            return Open(id: id, plan: plan, token: token, task: task, go: go)
        }
        var current = open(first, waiting: false)
        var successor: Open?
        var changedWhileOpening = false
        func end() async {
            forwarder.cancel()
            refresher.cancel()
            for stream in [current, successor].compactMap({ $0 }) {
                stream.task.cancel()
                stream.go.finish()
                _ = await stream.task.result
            }
        }
        for await next in signals {
            switch next {
            case .changed where successor != nil:
                changeWaiting.withLockedValue { $0 = false }
                changedWhileOpening = true
            case .fresh(let fresh) where successor != nil:
                // Taken by the next stream, opened once the one opening now has joined.
                token = fresh
                changedWhileOpening = true
            case .changed, .fresh:
                if case .fresh(let fresh) = next { token = fresh }
                changeWaiting.withLockedValue { $0 = false }
                var plan = current.plan
                if let state = presenceStates?.state { plan.presence?.state = state }
                guard plan.presence?.state != current.plan.presence?.state || token != current.token else { continue }
                plan.since = delivered.seq ?? plan.since
                successor = open(plan, waiting: true)
            case .joined(let id) where id == successor?.id:
                guard let next = successor else { continue }
                current.task.cancel()
                _ = await current.task.result
                next.go.finish()
                current = next
                successor = nil
                if changedWhileOpening {
                    changedWhileOpening = false
                    signal.yield(.changed)
                }
            case .ended(let id) where id == current.id:
                successor?.task.cancel()
                await end()
                return try await current.task.value
            case .ended(let id) where id == successor?.id:
                // The new stream failed before it joined: the subscription reconnects (with
                // the new state), as after any failure.
                let failed = successor
                successor = nil
                await end()
                try await failed?.task.value
                throw ConnectionProblem.endedByServer(closeCode: nil, code: nil)
            default:
                continue
            }
        }
        await end()
        throw CancellationError()
    }
}

/// The last seq the streams of one handover handed on: a whole snapshot's or an event's.
final class DeliveredSeq: Sendable {
    private let last: Synchronization.Atomic<Int64>

    init(_ since: Int64?) {
        last = Synchronization.Atomic(since ?? -1)
    }

    /// Nil before anything was handed on (and without a `since` to start from).
    var seq: Int64? {
        let value = last.load(ordering: .acquiring)
        return value < 0 ? nil : value
    }

    func advance(to seq: Int64) {
        last.store(seq, ordering: .releasing)
    }
}

import FanoutProtocol
import NIOConcurrencyHelpers

/// What an `updates` sequence yields: the observer callbacks, as values.
public enum RemoteCartUpdate: Sendable {
    /// The carts asked for, as they are now, once the replica holds them: the first element
    /// about the carts (`connection` changes may come before it).
    case loaded([Cart])
    /// An event, and its cart after it.
    case applied(CartEvent, Cart)
    /// The carts were replaced by the server's snapshot, or the consumer fell behind its buffer
    /// (`fellBehind`): either way these are the carts now, and later elements follow them.
    case resynced([Cart], ResyncReason)
    case connection(RemoteCartStore.ConnectionState)
    /// The server refused these carts to the store's credentials; the others are served.
    case refused([String], RemoteStoreError)
    /// The presence of a cart changed (a store made with presence): its members now, and what
    /// changed.
    case presence(cartID: String, members: [PresenceMember], change: PresenceChange)
    /// The carts asked for, as the cache file held them (`RemoteCartStore(cacheFile:)`), before
    /// any network: the first element about the carts on a cold start; `loaded` or events follow
    /// once the server is reached.
    case loadedFromCache([Cart])
    /// The writes of a cart not yet confirmed changed (one made, confirmed or rolled back): all
    /// of them, in order, and the cart as it shows with them.
    case pending([PendingWrite], showing: Cart)
    /// The server refused a write for good: it was rolled back (a `pending` without it follows).
    case rejected(PendingWrite, RemoteStoreError)
}

extension RemoteCartStore {
    /// The store's updates for `carts` as an `AsyncSequence`, for async code and SwiftUI tasks.
    /// It ends after `.connection(.closed)` when the store is closed.
    ///
    /// The sequence is an observer held by whoever iterates it: end the loop (or cancel its
    /// task) and it drops out like a released observer. Up to `bufferLimit` updates wait for a
    /// consumer; one that falls further behind loses the waiting updates and gets instead one
    /// `.resynced(carts, .fellBehind)` with its carts as they are at that moment — never a
    /// silent gap.
    public func updates(of carts: CartSelection = .all, bufferLimit: Int = 1_024) -> RemoteCartUpdates {
        let buffer = UpdateBuffer(selection: carts, limit: max(1, bufferLimit))
        observers.add(buffer, carts: carts)
        return RemoteCartUpdates(buffer: buffer)
    }
}

/// An `AsyncSequence` of one observer's updates (`RemoteCartStore.updates`).
public struct RemoteCartUpdates: AsyncSequence, Sendable {
    public typealias Element = RemoteCartUpdate
    let buffer: UpdateBuffer

    public func makeAsyncIterator() -> Iterator { Iterator(buffer: buffer) }

    public struct Iterator: AsyncIteratorProtocol {
        let buffer: UpdateBuffer

        public mutating func next() async -> RemoteCartUpdate? {
            await buffer.next()
        }
    }
}

/// The observer behind `RemoteCartUpdates`: a bounded buffer between the store's receiving task
/// and the consumer.
final class UpdateBuffer: CartObserver {
    private struct State {
        var items: [RemoteCartUpdate] = []
        var head = 0
        var waiter: CheckedContinuation<RemoteCartUpdate?, Never>?
        /// The store was closed: once the updates waiting are taken, the sequence ends.
        var finished = false
        /// The carts as of the last update pushed: what a `fellBehind` resync gives.
        var carts: [String: Cart] = [:]
        var count: Int { items.count - head }
    }

    let selection: CartSelection
    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(selection: CartSelection, limit: Int) {
        self.selection = selection
        self.limit = limit
    }

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) { push(.loaded(carts), source) }
    func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart]) { push(.loadedFromCache(carts), source) }
    func cartSource(_ source: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        push(.pending(pending, showing: cart), source)
    }
    func cartSource(_ source: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
        push(.rejected(write, error), source)
    }
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) { push(.applied(event, cart), source) }
    func cartSource(_ source: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        push(.resynced(carts, reason), source)
    }
    func cartSource(_ source: any CartSource, connectionDidChange state: CartConnectionState) {
        push(.connection(state), source)
        if state == .closed { self.state.withLockedValue { $0.finished = true } }
    }
    func cartSource(_ source: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {
        push(.refused(carts, error), source)
    }
    func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange) {
        push(.presence(cartID: cartID, members: members, change: change), source)
    }

    /// Called in the order the store decided its updates (on its receiving task, mostly): the
    /// carts of a `fellBehind` resync are those after the update being pushed, kept here, not
    /// read from the store (which may be further on, its later updates still to come).
    private func push(_ update: RemoteCartUpdate, _ source: any CartSource) {
        state.withLockedValue { state in
            switch update {
            case .loaded(let carts), .loadedFromCache(let carts), .resynced(let carts, _):
                state.carts = Dictionary(carts.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
            case .applied(_, let cart):
                state.carts[cart.id] = cart
            default:
                break
            }
            if let waiter = state.waiter {
                state.waiter = nil
                waiter.resume(returning: update)
            } else if state.count < limit {
                state.items.append(update)
            } else {
                state.items = [.resynced(selection.carts(in: state.carts), .fellBehind)]
                state.head = 0
            }
        }
    }

    func next() async -> RemoteCartUpdate? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                state.withLockedValue { state in
                    guard !Task.isCancelled else { return continuation.resume(returning: nil) }
                    guard state.count > 0 else {
                        if state.finished { return continuation.resume(returning: nil) }
                        state.waiter = continuation
                        return
                    }
                    let item = state.items[state.head]
                    state.head += 1
                    if state.head == state.items.count {
                        state.items.removeAll(keepingCapacity: true)
                        state.head = 0
                    } else if state.head > 64, state.head * 2 > state.items.count {
                        state.items.removeFirst(state.head)
                        state.head = 0
                    }
                    continuation.resume(returning: item)
                }
            }
        } onCancel: {
            state.withLockedValue { state in
                state.waiter?.resume(returning: nil)
                state.waiter = nil
            }
        }
    }
}

import Dispatch
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import WeakObservers

/// The carts of a fanout-server, kept live in this process and observed exactly like a local
/// `CartStore`: typed observers held weakly, each on its own queue, told the current state when
/// added, then every event of its carts once, in seq order.
///
/// The store holds one subscription to the server (WebSocket, or Server-Sent Events) for the
/// carts its living observers want, and only while some observer lives: the first observer
/// opens it, and when the last is released (no remove call needed) it closes within
/// `releaseCheckInterval` plus a moment, so the server sees the subscriber leave. It applies
/// the snapshot, then events, each once (a cart's `version` is the key: an event is applied
/// only if it is the cart's next version), and after any disconnect resumes from the last
/// applied seq. When the server cannot resume it (pruned history, another database), the
/// replica is replaced by the snapshot and observers get `didResync` with the reason.
///
/// When observers ask for carts the replica does not hold, the store reads their current state
/// over HTTP and resubscribes (a new connection, resumed from the replica's seq): carts that
/// stay observed lose and repeat nothing.
public final class RemoteCartStore: CartSource {
    /// The connection to the server, as observers are told of it (`CartConnectionState`,
    /// shared with `CartStore`).
    public typealias ConnectionState = CartConnectionState

    /// The server's HTTP API: typed writes (`addItem`, `setQuantity`, `removeItem`, `clear`)
    /// and reads of the carts as they are on the server.
    public let server: CartServerAPI
    /// The observers, held weakly.
    public let observers: Observers
    /// How often released observers are looked for: the bound on how long a connection (or a
    /// cart's events) outlives the last observer that wanted it.
    public let releaseCheckInterval: Duration

    package let replica = Replica()
    private let subscription: FanoutSubscription
    private let reconsider: AsyncStream<Void>.Continuation
    private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])

    /// - Parameters:
    ///   - server: `http://host:port` of the fanout-server.
    ///   - transport: WebSocket (the default), or Server-Sent Events where a WebSocket cannot pass.
    ///   - credentials: the token, or how to get a fresh one before each connection.
    ///   - releaseCheckInterval: how often released observers are looked for.
    public init(
        server: URL, transport: FanoutSubscription.Transport = .webSocket, credentials: Credentials = .none,
        releaseCheckInterval: Duration = .seconds(1)
    ) {
        self.server = CartServerAPI(baseURL: server, credentials: credentials)
        subscription = FanoutSubscription(server: server, transport: transport, credentials: credentials)
        self.releaseCheckInterval = releaseCheckInterval
        // At most one change waits: the loop reads every observer's interest when it wakes.
        let (changes, reconsider) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.reconsider = reconsider
        let observers = Observers(replica: replica, interestChanged: { reconsider.yield() })
        self.observers = observers
        replica.store.withLockedValue { $0 = WeakStore(store: self) }
        let replica = replica
        let subscription = subscription
        let api = self.server
        let run = Task<Void, Never> {
            _ = try? await subscription.run(
                plan: { try await replica.plan(for: observers, api: api) },
                reconsider: changes,
                handle: { update in try replica.take(update, observers: observers) })
        }
        let sweep = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: releaseCheckInterval)
                if replica.needsReplanning(observers) { _ = reconsider.yield() }
            }
        }
        tasks.withLockedValue { $0 = [run, sweep] }
    }

    /// Released, the store stops as `close()` does, without telling its observers: a store
    /// nobody holds has nobody to tell (its observers may outlive it; they get no more
    /// callbacks).
    deinit {
        for task in tasks.withLockedValue({ $0 }) { task.cancel() }
        reconsider.finish()
    }

    /// Closes the store: every observer is told `ConnectionState.closed` (on its queue, its last
    /// callback), the connection is closed (the server sees the subscriber leave) by the time
    /// this returns, and nothing more is applied or told. Later calls do nothing; an observer
    /// added afterwards gets no callback.
    public func close() async {
        replica.close(observers: observers)
        let tasks = self.tasks.withLockedValue { $0 }
        for task in tasks { task.cancel() }
        reconsider.finish()
        for task in tasks { await task.value }
    }

    /// A cart as the replica holds it now (consistent with the last callback made), or nil if
    /// no living observer wants it (or the replica has not loaded yet). An observed cart that
    /// has no events yet is empty at version 0.
    public func cart(_ id: String) -> Cart? {
        replica.read { $0.loaded ? $0.carts[id] : nil }
    }

    /// The carts the replica holds, by id.
    public var carts: [Cart] {
        replica.read { $0.carts.values.sorted { $0.id < $1.id } }
    }

    /// The seq the replica reflects: every event up to it has been applied. Nil before it
    /// loads.
    public var seq: Int64? {
        replica.read { $0.loaded ? $0.seq : nil }
    }

    /// The connection, now.
    public var connectionState: ConnectionState {
        replica.read(\.connection)
    }
}

extension RemoteCartStore {
    /// The weak observers of a `RemoteCartStore`, each with the carts it wants: `CartObserver`s,
    /// as a `CartStore`'s are.
    public final class Observers: CartObserverSet {
        let registry = WeakObserverSet<WeakRemoteCartObserver>()
        private let replica: Replica
        private let interestChanged: @Sendable () -> Void

        init(replica: Replica, interestChanged: @escaping @Sendable () -> Void) {
            self.replica = replica
            self.interestChanged = interestChanged
        }

        /// Adds `observer`, held weakly, for `carts`. If the replica holds them it is told their
        /// state now (on its queue); otherwise as soon as the store has loaded them. Adding an
        /// observer again replaces its registration, and it is told the state again.
        ///
        /// - Parameters:
        ///   - observer: held weakly.
        ///   - carts: the carts it wants: `.only([...])`, or `.all`.
        ///   - queue: a serial queue to call it on, in order; `nil` calls it on the store's
        ///     receiving task.
        public func add(_ observer: any CartObserver, carts: CartSelection, queue: DispatchQueue?) {
            let interest = ObserverInterest(carts)
            let needsMore = replica.admit { replica in
                registry.add(observer, queue: queue, interest: interest)
                return replica.greet(observer, interest, in: registry)
            }
            if needsMore { interestChanged() }
        }

        /// Removes `observer`: after this returns it gets no further callback (not even one
        /// queued on its queue). Carts no other observer wants stop arriving soon after.
        public func remove(_ observer: any CartObserver) {
            registry.remove(observer)
            if replica.needsReplanning(self) { interestChanged() }
        }

        public func contains(_ observer: any CartObserver) -> Bool { registry.contains(observer) }

        /// Asks the subscription to make its plan again (the refused carts changed).
        func replan() { interestChanged() }

        /// The number of live observers (O(n): released ones are swept first).
        public var count: Int { registry.count }

        /// What the living observers want together; nil when none lives.
        var wanted: CartSelection? {
            registry.interests.lazy.map(\.selection).reduce(nil) { $0?.union($1) ?? $1 }
        }
    }
}

/// Lets the replica hand observers the store without keeping it alive.
struct WeakStore: Sendable {
    weak var store: RemoteCartStore?
}

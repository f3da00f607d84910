import Dispatch
import FanoutClient
import Foundation
import NIOConcurrencyHelpers
import WeakObservers

/// A cart store in memory whose every turn a test or a SwiftUI preview scripts: no server, no
/// file, no clock. It is a `CartSource` and a `CartWriter`, as `CartStore` and
/// `RemoteCartStore` are, and keeps their promises to observers (held weakly, told their carts'
/// state first, then each later change once, in order, on their queue), so a view model or an
/// `ObservedCarts` written for the real stores runs against it unchanged.
///
/// ```swift
/// let store = ScriptedCartStore(carts: [Cart(id: "alice")])
/// let model = BasketModel(store, cart: "alice")            // told the empty cart
/// try store.emit(.addItem(sku: "apple", quantity: 2, unitPriceCents: 50, name: nil), to: "alice")
/// store.setConnection(.reconnecting(.unreachable("offline")))  // "Offline" in the view
/// store.writeHandling = .hold                               // writes stay pending…
/// let write = try await store.addItem("pear", quantity: 1, unitPriceCents: 80, to: "alice")
/// store.reject(write, because: .refused(status: 409, code: .versionConflict, rawCode: "version_conflict", message: "changed"))
/// ```
///
/// What it does is what the script says, at once, on the scripting thread: an observer
/// without a queue is called before the scripting call returns (never under the store's
/// lock: it may read the store, or add observers, from its callback).
public final class ScriptedCartStore: CartWriter {
    /// What becomes of a write made through the store (`write`, `addItem`, …).
    public enum WriteHandling: Sendable, Hashable {
        /// Shown pending, then confirmed at once, as by a server that answers at once: its event
        /// is applied (`didApply`) and its outcome is `confirmed`. A write the cart's state
        /// refuses (a line that is not there) is rejected, as the server would.
        case confirm
        /// Shown pending until the script says: `confirm(_:)`, `confirmPendingWrites()` or
        /// `reject(_:because:)` (a store offline, or a server slow to answer).
        case hold
    }

    private struct State {
        var carts: [String: Cart]
        var seq: Int64
        var connection: CartConnectionState
        var writeHandling: WriteHandling
        var refused: [String: RemoteStoreError] = [:]
        var presence: [String: [PresenceMember]] = [:]
        var pending: [PendingWrite] = []
        var outcomes: [String: WriteOutcome] = [:]
        var waiting: [String: [CheckedContinuation<WriteOutcome, Never>]] = [:]
    }

    /// The observers, held weakly, each with the carts it wants.
    public let observers: Observers
    private let state: NIOLockedValueBox<State>
    private let calls: DeferredCalls

    /// A store holding `carts` (a cart not among them is empty at version 0 when an observer
    /// names it), their events numbered after `seq`, reached as `connection` says, its writes
    /// handled as `writes` says.
    public init(carts: [Cart] = [], seq: Int64 = 0, connection: CartConnectionState = .live, writes: WriteHandling = .confirm) {
        let calls = DeferredCalls()
        self.calls = calls
        state = NIOLockedValueBox(
            State(
                carts: Dictionary(carts.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last }), seq: seq, connection: connection,
                writeHandling: writes))
        observers = Observers(calls: calls)
        observers.store = self
    }

    /// Changes the store's state under its lock and decides whom to tell what; the calls are
    /// made once the lock is released.
    private func script<T>(_ body: (inout State, ObserverSet) -> T) -> T {
        let result = state.withLockedValue { body(&$0, observers.registry) }
        calls.run()
        return result
    }

    // MARK: What observers and views read

    /// How the store reaches its carts now, as the script last set it.
    public var connectionState: CartConnectionState {
        state.withLockedValue(\.connection)
    }

    /// A cart as it is now (without the writes pending on it), or nil if the store has none
    /// of that id.
    public func cart(_ id: String) -> Cart? {
        state.withLockedValue { $0.carts[id] }
    }

    /// The carts, by id.
    public var carts: [Cart] {
        state.withLockedValue { $0.carts.values.sorted { $0.id < $1.id } }
    }

    /// The seq of the last event.
    public var seq: Int64 {
        state.withLockedValue(\.seq)
    }

    /// The writes made through the store and not yet confirmed or rejected, in order.
    public var pendingWrites: [PendingWrite] {
        state.withLockedValue(\.pending)
    }

    /// What becomes of the writes made through the store from now on.
    public var writeHandling: WriteHandling {
        get { state.withLockedValue(\.writeHandling) }
        set { state.withLockedValue { $0.writeHandling = newValue } }
    }

    /// Who is on `cartID`, as the script last said; nil if it never said.
    public func presence(of cartID: String) -> [PresenceMember]? {
        state.withLockedValue { $0.presence[cartID] }
    }

    // MARK: The script

    /// A change made elsewhere (another device, the server's operator): committed as the next
    /// event, told to the observers of the cart (`didApply`).
    ///
    /// - Throws: `FanoutError` for a write the cart's rules refuse (a value out of range, a
    ///   line that is not there): nothing changes.
    @discardableResult
    public func emit(_ write: CartWrite, to cartID: String) throws(FanoutError) -> CartEvent {
        try write.check()
        try CartLimits.checkCartID(cartID)
        let result: Result<CartEvent, FanoutError> = script { state, set in
            Result { () throws(FanoutError) in try Self.commit(write, to: cartID, key: nil, in: &state, telling: set, store: self) }
        }
        return try result.get()
    }

    /// The store's carts replaced by `carts` (a snapshot), as when events could not be given:
    /// observers that were told their carts get `didResync` with `reason`.
    public func replaceCarts(_ carts: [Cart], because reason: ResyncReason = .historyPruned) {
        script { state, set in
            state.carts = Dictionary(carts.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
            let now = state
            set.notify(where: \.isLoaded) { observer, interest in
                observer.cartSource(self, didResync: Self.carts(of: interest.selection, in: now), because: reason)
            }
        }
    }

    /// The connection as `connection` says (`.reconnecting(.unreachable(…))`, `.refused(…)`,
    /// `.live`, …): told to every observer (`connectionDidChange`) if it changed.
    public func setConnection(_ connection: CartConnectionState) {
        script { state, set in
            guard state.connection != connection else { return }
            state.connection = connection
            set.notify { $0.cartSource(self, connectionDidChange: connection) }
        }
    }

    /// The server refused `cartID` to the store's credentials, because of `error`
    /// (`forbidden_cart`): its observers are told (`didRefuse`), and it is left out of what
    /// later observers are told.
    public func refuse(_ cartID: String, because error: RemoteStoreError) {
        script { state, set in
            state.refused[cartID] = error
            set.notify(where: { $0.selection.contains(cartID) }) { observer, _ in
                observer.cartSource(self, didRefuse: [cartID], because: error)
            }
        }
    }

    /// Who is on `cartID` now, oldest first (`PresenceChange.whole`).
    public func setPresence(_ members: [PresenceMember], of cartID: String) {
        changePresence(of: cartID, .whole, members: members)
    }

    /// One presence change of `cartID`: a member joins, changes its state or leaves, or
    /// presence is unavailable; the members are kept as the change says and told with it.
    public func changePresence(of cartID: String, _ change: PresenceChange) {
        changePresence(of: cartID, change, members: nil)
    }

    private func changePresence(of cartID: String, _ change: PresenceChange, members whole: [PresenceMember]?) {
        script { state, set in
            var members = whole ?? state.presence[cartID] ?? []
            switch change {
            case .joined(let member), .updated(let member):
                members.removeAll { $0.id == member.id }
                members.append(member)
            case .left(let id, _):
                members.removeAll { $0.id == id }
            case .unavailable:
                members = []
            case .whole:
                break
            }
            members.sort { $0.since < $1.since }
            state.presence[cartID] = members
            let told = members
            set.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
                observer.cartSource(self, didChangePresence: told, of: cartID, change: change)
            }
        }
    }

    /// Confirms `write` (held): its event is applied and its outcome is `confirmed`; rejected
    /// instead if the cart's state refuses it now, as the server would.
    public func confirm(_ write: PendingWrite) {
        script { state, set in Self.settle(write.id, in: &state, telling: set, store: self) }
    }

    /// Confirms every pending write, in the order they were made.
    public func confirmPendingWrites() {
        script { state, set in
            for write in state.pending { Self.settle(write.id, in: &state, telling: set, store: self) }
        }
    }

    /// Rejects `write` (held) for `error`: rolled back, its cart's observers told
    /// (`didReject`, then `didChangePending`), its outcome `rejected`.
    public func reject(_ write: PendingWrite, because error: RemoteStoreError) {
        script { state, set in Self.end(write.id, .rejected(error), in: &state, telling: set, store: self) }
    }

    // MARK: CartWriter

    /// Makes `write` on the cart: shown pending at once (`didChangePending`), then confirmed or
    /// held as `writeHandling` says.
    ///
    /// - Throws: `RemoteStoreError.invalid` for values the rules refuse, as `RemoteCartStore`
    ///   does.
    @discardableResult
    public func write(_ write: CartWrite, to cartID: String, expectedVersion: Int64? = nil) async throws(RemoteStoreError) -> PendingWrite {
        do {
            try write.check()
            try CartLimits.checkCartID(cartID)
        } catch {
            throw .invalid(error)
        }
        let pending = PendingWrite(id: UUID().uuidString, cartID: cartID, write: write, expectedVersion: expectedVersion, madeAt: Date())
        script { state, set in
            state.pending.append(pending)
            Self.tellPending(of: cartID, in: state, telling: set, store: self)
            if state.writeHandling == .confirm { Self.settle(pending.id, in: &state, telling: set, store: self) }
        }
        return pending
    }

    /// Waits for what becomes of `write`: at once when it was confirmed or rejected, later
    /// for a held one; `unknown` for a write this store did not make.
    public func outcome(of write: PendingWrite) async -> WriteOutcome {
        await withCheckedContinuation { continuation in
            state.withLockedValue { state in
                if let outcome = state.outcomes[write.id] {
                    continuation.resume(returning: outcome)
                } else if state.pending.contains(where: { $0.id == write.id }) {
                    state.waiting[write.id, default: []].append(continuation)
                } else {
                    continuation.resume(returning: .unknown)
                }
            }
        }
    }

    // MARK: Steps, under the lock

    typealias ObserverSet = WeakObserverSet<WeakRemoteCartObserver>

    /// The carts an observer of `selection` is told: those held, a named one not held empty at
    /// version 0, a refused one left out.
    private static func carts(of selection: CartSelection, in state: State) -> [Cart] {
        switch selection {
        case .all: selection.carts(in: state.carts).filter { state.refused[$0.id] == nil }
        case .carts(let ids): ids.sorted().filter { state.refused[$0] == nil }.map { state.carts[$0] ?? Cart(id: $0) }
        }
    }

    private static func commit(
        _ write: CartWrite, to cartID: String, key: String?, in state: inout State, telling set: ObserverSet, store: ScriptedCartStore
    ) throws(FanoutError) -> CartEvent {
        var cart = state.carts[cartID] ?? Cart(id: cartID)
        let change = try write.change(to: cart)
        state.seq += 1
        let event = CartEvent(
            seq: state.seq, cartID: cartID, change: change, version: cart.version + 1, committedAt: Date(), idempotencyKey: key)
        cart.apply(event)
        state.carts[cartID] = cart
        let after = cart
        set.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
            observer.cartSource(store, didApply: event, to: after)
        }
        return event
    }

    /// Commits the pending write `id` (or rejects it, as the server would, if its cart
    /// refuses it now, or its expected version is not the cart's).
    private static func settle(_ id: String, in state: inout State, telling set: ObserverSet, store: ScriptedCartStore) {
        guard let write = state.pending.first(where: { $0.id == id }) else { return }
        let version = state.carts[write.cartID]?.version ?? 0
        if let expected = write.expectedVersion, expected != version {
            let error = FanoutError(.versionConflict, "cart \(write.cartID) is at version \(version), not \(expected)")
            return end(id, .rejected(refusal(error)), in: &state, telling: set, store: store)
        }
        do {
            let event = try commit(write.write, to: write.cartID, key: write.id, in: &state, telling: set, store: store)
            end(id, .confirmed(seq: event.seq), in: &state, telling: set, store: store)
        } catch {
            end(id, .rejected(refusal(error)), in: &state, telling: set, store: store)
        }
    }

    /// How a server says `error` of a write.
    private static func refusal(_ error: FanoutError) -> RemoteStoreError {
        .refused(status: error.code.httpStatus ?? 400, code: error.code, rawCode: error.code.rawValue, message: error.message)
    }

    /// Ends the pending write `id` with `outcome`: its waiters resumed, its cart's observers
    /// told (`didReject` for a rejection, then what to show).
    private static func end(
        _ id: String, _ outcome: WriteOutcome, in state: inout State, telling set: ObserverSet, store: ScriptedCartStore
    ) {
        guard let index = state.pending.firstIndex(where: { $0.id == id }) else { return }
        let write = state.pending.remove(at: index)
        state.outcomes[id] = outcome
        for waiter in state.waiting.removeValue(forKey: id) ?? [] { waiter.resume(returning: outcome) }
        if case .rejected(let error) = outcome {
            set.notify(where: { $0.isLoaded && $0.selection.contains(write.cartID) }) { observer, _ in
                observer.cartSource(store, didReject: write, because: error)
            }
        }
        tellPending(of: write.cartID, in: state, telling: set, store: store)
    }

    /// Tells the observers of `cartID` its pending writes and the cart to show.
    private static func tellPending(of cartID: String, in state: State, telling set: ObserverSet, store: ScriptedCartStore) {
        let pending = state.pending.filter { $0.cartID == cartID }
        let shown = (state.carts[cartID] ?? Cart(id: cartID)).applying(pending)
        set.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
            observer.cartSource(store, didChangePending: pending, showing: shown)
        }
    }

    /// Tells a newly added observer the state: its carts, then the writes pending on them, the
    /// carts refused and their presence.
    fileprivate func greet(_ observer: any CartObserver, _ interest: ObserverInterest) {
        script { state, set in
            interest.markLoaded()
            let carts = Self.carts(of: interest.selection, in: state)
            let pending = Dictionary(grouping: state.pending.filter { interest.selection.contains($0.cartID) }, by: \.cartID)
            let shown = pending.mapValues { writes in (state.carts[writes[0].cartID] ?? Cart(id: writes[0].cartID)).applying(writes) }
            let refused = state.refused.filter { interest.selection.contains($0.key) }
            let presence = state.presence.filter { interest.selection.contains($0.key) }
            set.notify(only: observer) { observer in
                observer.cartSource(self, didLoad: carts)
                for (cartID, writes) in pending.sorted(by: { $0.key < $1.key }) {
                    observer.cartSource(self, didChangePending: writes, showing: shown[cartID]!)
                }
                for (cartID, error) in refused.sorted(by: { $0.key < $1.key }) {
                    observer.cartSource(self, didRefuse: [cartID], because: error)
                }
                for (cartID, members) in presence.sorted(by: { $0.key < $1.key }) {
                    observer.cartSource(self, didChangePresence: members, of: cartID, change: .whole)
                }
            }
        }
    }
}

extension ScriptedCartStore {
    /// The weak observers of a `ScriptedCartStore`, each with the carts it wants.
    public final class Observers: CartObserverSet, @unchecked Sendable {  // `store` is set once, in the store's init.
        let registry: WeakObserverSet<WeakRemoteCartObserver>
        fileprivate weak var store: ScriptedCartStore?

        init(calls: DeferredCalls) {
            registry = WeakObserverSet(deferringCallsTo: calls)
        }

        /// Adds `observer`, held weakly, for `carts`, and tells it their state now (on its
        /// queue). Adding it again replaces its registration, and it is told the state again.
        public func add(_ observer: any CartObserver, carts: CartSelection, queue: DispatchQueue?) {
            let interest = ObserverInterest(carts)
            registry.add(observer, queue: queue, interest: interest)
            store?.greet(observer, interest)
        }

        /// Removes `observer`: after this returns it gets no further callback.
        public func remove(_ observer: any CartObserver) {
            registry.remove(observer)
        }

        public func contains(_ observer: any CartObserver) -> Bool {
            registry.contains(observer)
        }

        /// The number of live observers.
        public var count: Int { registry.count }
    }
}

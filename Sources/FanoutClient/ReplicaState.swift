import FanoutConcurrency
import FanoutProtocol
import Foundation

// The parts of a `Replica`'s state, each owning its fields and saying its transitions; the
// replica holds them under its one lock and decides, from what they say, whom to tell what.

/// The carts the replica holds and how far they are: what observers are told, and what a
/// subscription resumes after.
struct HeldCarts {
    /// The carts held: every cart of `covered` that has events (and, for named carts, the
    /// others too, empty at version 0).
    private(set) var carts: [String: Cart] = [:]
    /// The carts the replica keeps up to date; nil when no observer lives.
    private(set) var covered: CartSelection?
    /// Every event up to it has been applied (once `loaded`).
    private(set) var seq: Int64 = 0
    /// A snapshot (or the carts read over HTTP, or the cache file's) has been taken since the
    /// last reset.
    private(set) var loaded = false
    /// Set when the carts were dropped for want of consistency: the next snapshot is a resync,
    /// with this reason, for the observers that had the old state.
    private(set) var resyncBecause: ResyncReason?
    /// The carts came from the cache file and the server has not been reached since.
    private(set) var fromCache = false
    /// The identity of the server's database the carts are of (its welcome's `databaseId`).
    private(set) var databaseID: String?

    /// What an event did to the carts.
    enum Application {
        /// Not a cart held (or nothing loaded): nothing changed.
        case notHeld
        /// Applied already (replayed after a resubscription, or its cart was read over HTTP):
        /// only the seq moved.
        case already
        /// Applied: the cart after it.
        case applied(Cart)
    }

    /// Whether `cartID` is held and up to date.
    func holds(_ cartID: String) -> Bool {
        loaded && covered?.contains(cartID) == true
    }

    /// The cart `cartID` as shown with `pending` writes on top.
    func shown(_ cartID: String, with pending: [PendingWrite]) -> Cart {
        (carts[cartID] ?? Cart(id: cartID)).applying(pending)
    }

    /// The cache file's carts, as of their seq.
    mutating func restore(_ saved: ReplicaFile.Saved) {
        guard let covered = saved.covered, let seq = saved.seq else { return }
        carts = saved.carts
        self.covered = covered
        self.seq = seq
        databaseID = saved.databaseID
        loaded = true
        fromCache = true
    }

    /// Nothing held yet for `selection`: a subscription from a snapshot fills it.
    mutating func startAnew(covering selection: CartSelection) {
        covered = selection
        carts = [:]
    }

    /// Nothing followed any more: the carts go (not those of the cache file, kept for the
    /// observers they are for); the database they were of is remembered.
    mutating func release() {
        guard !fromCache else { return }
        self = HeldCarts(databaseID: databaseID)
    }

    /// Nothing held, nothing covered (every cart wanted was refused).
    mutating func forget() {
        covered = nil
        loaded = false
        carts = [:]
    }

    /// Carts read over HTTP (their state at or after the seq) added to those held, unless
    /// `previous` (what was covered when they were read) covered them; the held ones narrowed
    /// to `selection`, now covered.
    mutating func cover(_ selection: CartSelection, adding fetched: [Cart], readWhileCovering previous: CartSelection) {
        for cart in fetched where !previous.contains(cart.id) { carts[cart.id] = cart }
        carts = carts.filter { selection.contains($0.key) }
        covered = selection
    }

    /// The carts can no longer be trusted (`reason`): the next snapshot replaces them.
    mutating func drop(because reason: ResyncReason) {
        loaded = false
        resyncBecause = reason
    }

    /// The server's database, from its welcome; the carts are no longer the cache file's.
    mutating func welcomed(by database: String?) {
        databaseID = database ?? databaseID
        fromCache = false
    }

    /// Whether the welcome's `database` is another than the one the carts are of.
    func isOtherDatabase(_ database: String?) -> Bool {
        guard let databaseID, let database, loaded else { return false }
        return database != databaseID
    }

    /// Replaces the carts by `snapshot`'s (named carts it lacks empty at version 0). Returns
    /// the carts now held, and the resync to tell the observers that had the old carts, if any.
    mutating func load(_ snapshot: CartSnapshot, reason: SnapshotReason) -> (carts: [String: Cart], resync: ResyncReason?)? {
        guard let covered else { return nil }
        var loadedCarts: [String: Cart] = [:]
        if case .carts(let ids) = covered {
            for id in ids { loadedCarts[id] = Cart(id: id) }
        }
        for cart in snapshot.carts where covered.contains(cart.id) { loadedCarts[cart.id] = cart }
        let wasLoaded = loaded
        carts = loadedCarts
        seq = snapshot.seq
        loaded = true
        let resync: ResyncReason? =
            switch reason {
            case .initial: resyncBecause
            case .sinceTooOld: .historyPruned
            case .sinceAhead: .otherDatabase
            }
        resyncBecause = nil
        // A first snapshot is a resync only when the carts were dropped as not to be trusted.
        let told = resync.flatMap { wasLoaded || $0 == .inconsistent || $0 == .otherDatabase ? $0 : nil }
        return (loadedCarts, told)
    }

    /// Applies `event` if it is its cart's next version; throws `ProtocolViolation` (and drops
    /// the carts as inconsistent) when a version was skipped.
    mutating func apply(_ event: CartEvent) throws -> Application {
        guard holds(event.cartID) else { return .notHeld }
        var cart = carts[event.cartID] ?? Cart(id: event.cartID)
        guard event.version > cart.version else {
            seq = max(seq, event.seq)
            return .already
        }
        guard event.version == cart.version + 1 else {
            // A version skipped: something was lost. Rebuild from a snapshot rather than trust it.
            drop(because: .inconsistent)
            throw ProtocolViolation(
                description:
                    "event \(event.seq) takes cart \(event.cartID) to version \(event.version), but the replica has \(cart.version)")
        }
        cart.apply(event)
        carts[event.cartID] = cart
        seq = max(seq, event.seq)
        return .applied(cart)
    }
}

/// The connection as observers are told it, and the store's own steps: suspended, closed.
struct Lifecycle {
    private(set) var connection: RemoteCartStore.ConnectionState = .idle
    /// `RemoteCartStore.close()` was called: nothing more is applied or told.
    private(set) var closed = false
    /// `RemoteCartStore.suspend()` was called, and not `resume()` since: no connection.
    private(set) var suspended = false
    /// Callers of `suspend()` waiting for the connection to be closed.
    private var suspendWaiters: [CheckedContinuation<Void, Never>] = []

    /// Sets the connection; whether it changed.
    mutating func set(_ connection: RemoteCartStore.ConnectionState) -> Bool {
        guard self.connection != connection else { return false }
        self.connection = connection
        return true
    }

    /// `waiter` waits for the connection to be let go; false (not kept) when the store closed.
    mutating func suspend(_ waiter: CheckedContinuation<Void, Never>) -> Bool {
        guard !closed else { return false }
        suspended = true
        suspendWaiters.append(waiter)
        return true
    }

    /// The connection was let go: those waiting for it, to resume.
    mutating func letGo() -> [CheckedContinuation<Void, Never>] {
        defer { suspendWaiters = [] }
        return suspendWaiters
    }

    /// Back from suspended; whether it was.
    mutating func resume() -> Bool {
        defer { suspended = false }
        return suspended
    }

    /// Closed: those waiting for a suspension, to resume.
    mutating func close() -> [CheckedContinuation<Void, Never>] {
        closed = true
        return letGo()
    }

    /// Waiting before the next attempt (the network may be back): a retry now helps.
    var isWaitingToRetry: Bool {
        switch connection {
        case .reconnecting, .refused: !suspended && !closed
        default: false
        }
    }
}

/// Carts the server refused to the store's credentials (`forbidden_cart`): left out of the
/// subscription, their observers told; asked again after `FanoutSubscription.refusalPause`,
/// or once no observer wants them.
struct Refusals {
    /// A cart the server refused, and when.
    struct Refusal {
        let error: RemoteStoreError
        let at: ContinuousClock.Instant
    }

    private(set) var refused: [String: Refusal] = [:]
    /// A subscription was refused for one of its carts: find which before the next plan.
    private var findRefusedCarts = false
    /// When that was last done: at most once per `FanoutSubscription.refusalPause`.
    private var foundAt: ContinuousClock.Instant?

    /// Why `cartID` was refused, if it is.
    func error(of cartID: String) -> RemoteStoreError? { refused[cartID]?.error }

    /// `selection` without the carts refused.
    func served(_ selection: CartSelection) -> CartSelection {
        guard case .carts(let ids) = selection, !refused.isEmpty else { return selection }
        return .carts(ids.filter { refused[$0] == nil })
    }

    /// Whether a refusal is old enough to be asked again.
    var anyExpired: Bool {
        refused.values.contains { $0.at.duration(to: .now) >= FanoutSubscription.refusalPause }
    }

    /// The newest refusal.
    var latest: Refusal? { refused.values.max { $0.at < $1.at } }

    mutating func refuse(_ cartID: String, because error: RemoteStoreError) {
        refused[cartID] = Refusal(error: error, at: .now)
    }

    /// Forgets refusals of carts `wanted` does not name, and those old enough: asked again.
    /// Returns whether the carts refusing a subscription must be found first.
    mutating func plan(wanting wanted: CartSelection) -> Bool {
        refused = refused.filter { id, refusal in
            wanted.contains(id) && refusal.at.duration(to: .now) < FanoutSubscription.refusalPause
        }
        defer { findRefusedCarts = false }
        return findRefusedCarts
    }

    /// A subscription of named carts was refused `forbidden_cart`: whether to find which of
    /// them (at once, at most once per pause) rather than say the whole store is refused.
    mutating func subscriptionRefused() -> Bool {
        guard foundAt.map({ $0.duration(to: .now) >= FanoutSubscription.refusalPause }) ?? true else { return false }
        findRefusedCarts = true
        foundAt = .now
        return true
    }
}

/// Callers of `applied(through:)` waiting for the replica to reach a seq.
struct SeqWaiters {
    private var waiters: [(seq: Int64, continuation: CheckedContinuation<Void, Never>)] = []

    mutating func add(_ continuation: CheckedContinuation<Void, Never>, for seq: Int64) {
        waiters.append((seq, continuation))
    }

    /// Those waiting for a seq at or below `reached`, to resume.
    mutating func reached(_ reached: Int64) -> [CheckedContinuation<Void, Never>] {
        guard !waiters.isEmpty else { return [] }
        let ready = waiters.filter { $0.seq <= reached }.map(\.continuation)
        waiters.removeAll { $0.seq <= reached }
        return ready
    }
}

/// Presence as the replica holds it, for a store made with it.
struct HeldPresence {
    /// The store was made with presence.
    var wanted = false
    /// The members of each cart whose presence the server sent, oldest first.
    private(set) var members: [String: [PresenceMember]] = [:]
    /// Why the store is without presence now, when it wants it.
    private(set) var problem: RemoteStoreError?

    /// Presence of carts not in `carts` forgotten (a new plan's).
    mutating func keep(only carts: Set<String>) {
        members = members.filter { carts.contains($0.key) }
    }

    /// Without presence for `error`; whether it had presence until now (observers are told
    /// once, until it comes back).
    mutating func unavailable(_ error: RemoteStoreError) -> Bool {
        let wasAvailable = problem == nil
        problem = error
        members = [:]
        return wasAvailable
    }

    /// Applies one presence message: the cart and the change it made, or nil for a message
    /// that is not presence.
    mutating func apply(_ message: ServerMessage) -> (cartID: String, change: PresenceChange)? {
        switch message {
        case .presence(let cart, let all):
            problem = nil
            members[cart] = all.sorted { $0.since < $1.since }
            return (cart, .whole)
        case .presenceJoin(let cart, let member):
            members[cart, default: []].upsert(member)
            return (cart, .joined(member))
        case .presenceUpdate(let cart, let member):
            members[cart, default: []].upsert(member)
            return (cart, .updated(member))
        case .presenceLeave(let cart, let id, let reason):
            members[cart]?.removeAll { $0.id == id }
            return (cart, .left(id, reason: reason))
        default:
            return nil
        }
    }

    /// Forgets the presence of `cartID` (not followed, or not wanted).
    mutating func forget(_ cartID: String) {
        members[cartID] = nil
    }

    /// What an observer of `selection` is told of presence right after its carts' state: the
    /// presence known of each named cart (`whole`), or, when the store is without presence,
    /// why (`unavailable`).
    func told(to selection: CartSelection) -> [(String, [PresenceMember], PresenceChange)] {
        guard case .carts(let ids) = selection else { return [] }
        let problem = wanted ? problem : nil
        return ids.sorted().compactMap { id in
            if let problem { return (id, [], .unavailable(problem)) }
            return members[id].map { (id, $0, .whole) }
        }
    }
}

extension [PresenceMember] {
    /// Puts `member` in place of the one with its identity, or adds it, oldest first.
    fileprivate mutating func upsert(_ member: PresenceMember) {
        if let index = firstIndex(where: { $0.id == member.id }) {
            self[index] = member
        } else {
            append(member)
            sort { $0.since < $1.since }
        }
    }
}

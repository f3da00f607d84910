import FanoutProtocol
import Synchronization
import WeakObservers

/// An observer of a `RemoteCartStore`, held weakly by the store, as a `CartStoreObserver` is by
/// a `CartStore`.
///
/// Add it with `store.observers.add(observer, carts: .only(["alice"]), queue: queue)` and keep
/// it alive yourself: when you release it, it drops out by itself, and once no observer wants a
/// cart any more the server stops sending it (the connection closes when none is left). Every
/// method has a default that does nothing: implement the ones you need.
///
/// Callbacks come in seq order. Without a queue they run on the store's receiving task, while it
/// holds the replica: keep them short (reading the store from them is fine).
public protocol RemoteCartObserver: AnyObject, Sendable {
    /// The carts this observer asked for, as they are now: its first callback, once the replica
    /// holds them. Later events follow, each once, with none missing between.
    func remoteStore(_ store: RemoteCartStore, didLoad carts: [Cart])

    /// An event was applied to one of this observer's carts; `cart` is the cart after it.
    func remoteStore(_ store: RemoteCartStore, didApply event: CartEvent, to cart: Cart)

    /// The replica was replaced by the server's snapshot (`carts` are this observer's), because
    /// the events it missed could not be replayed. Later events follow the snapshot.
    func remoteStore(_ store: RemoteCartStore, didResync carts: [Cart], because reason: ResyncReason)

    /// The connection to the server changed.
    func remoteStore(_ store: RemoteCartStore, connectionDidChange state: RemoteCartStore.ConnectionState)

    /// The server refused some of this observer's carts to the store's credentials (a cart
    /// the token's `carts` claim does not name: `forbidden_cart`). They are left out: no state
    /// or event of them comes, while its other carts, and other observers, are served as usual.
    /// They are asked for again after `FanoutSubscription.refusalPause`.
    func remoteStore(_ store: RemoteCartStore, didRefuse carts: [String], because error: RemoteStoreError)
}

extension RemoteCartObserver {
    public func remoteStore(_ store: RemoteCartStore, didLoad carts: [Cart]) {}
    public func remoteStore(_ store: RemoteCartStore, didApply event: CartEvent, to cart: Cart) {}
    public func remoteStore(_ store: RemoteCartStore, didResync carts: [Cart], because reason: ResyncReason) {}
    public func remoteStore(_ store: RemoteCartStore, connectionDidChange state: RemoteCartStore.ConnectionState) {}
    public func remoteStore(_ store: RemoteCartStore, didRefuse carts: [String], because error: RemoteStoreError) {}
}

/// Why a replica was replaced by a snapshot instead of receiving the events it missed.
public enum ResyncReason: String, Sendable, Hashable {
    /// The server pruned the events after the replica's seq from its log.
    case historyPruned = "history_pruned"
    /// The server's log ends before the replica's seq: it is another database (or was restored
    /// from a backup).
    case otherDatabase = "other_database"
    /// An event did not follow the cart's version: the replica was rebuilt rather than trusted.
    case inconsistent
    /// An `updates` consumer fell behind its buffer: what it missed is summed up by the carts.
    case fellBehind = "fell_behind"
}

/// Which carts an observer wants.
public enum CartSelection: Sendable, Hashable {
    case all
    case carts(Set<String>)

    /// These carts only.
    public static func only(_ ids: some Sequence<String>) -> CartSelection { .carts(Set(ids)) }

    public func contains(_ cartID: String) -> Bool {
        switch self {
        case .all: true
        case .carts(let ids): ids.contains(cartID)
        }
    }

    /// Whether every cart of `other` is in this one.
    func covers(_ other: CartSelection) -> Bool {
        switch (self, other) {
        case (.all, _): true
        case (.carts, .all): false
        case (.carts(let mine), .carts(let theirs)): theirs.isSubset(of: mine)
        }
    }

    func union(_ other: CartSelection) -> CartSelection {
        switch (self, other) {
        case (.carts(let mine), .carts(let theirs)): .carts(mine.union(theirs))
        default: .all
        }
    }

    /// The ids to subscribe to: nil for all, sorted otherwise.
    var subscription: [String]? {
        switch self {
        case .all: nil
        case .carts(let ids): ids.sorted()
        }
    }
}

/// One observer's registration details: what it wants, and whether it was told the current
/// state yet (until then it gets no event).
final class ObserverInterest: Sendable {
    let selection: CartSelection
    private let loaded = Atomic<Bool>(false)

    init(_ selection: CartSelection) {
        self.selection = selection
    }

    var isLoaded: Bool { loaded.load(ordering: .acquiring) }

    func markLoaded() { loaded.store(true, ordering: .releasing) }
}

/// How the store's `WeakObserverSet` holds a `RemoteCartObserver`: weakly, with its interest.
/// A main-actor observer's `MainActorRelay` is held strongly instead, and stands for its target
/// (which it holds weakly) until the target is released.
struct WeakRemoteCartObserver: WeakObserverReference {
    typealias Interest = ObserverInterest
    private weak var plain: (any RemoteCartObserver)?
    private let relay: MainActorRelay?

    init(_ observer: any RemoteCartObserver) {
        relay = observer as? MainActorRelay
        plain = relay == nil ? observer : nil
    }

    var observer: (any RemoteCartObserver)? {
        guard let relay else { return plain }
        return relay.target == nil ? nil : relay
    }

    static func identity(of observer: any RemoteCartObserver) -> ObjectIdentifier {
        (observer as? MainActorRelay)?.targetID ?? ObjectIdentifier(observer)
    }
}

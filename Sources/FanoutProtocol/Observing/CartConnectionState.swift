/// How a cart source reaches its carts, as observers are told of it
/// (`CartObserver.cartSource(_:connectionDidChange:)`).
///
/// A `RemoteCartStore` goes through all of them. An in-process `CartStore` is always `live`
/// (its carts are its own) until it is closed, when its observers are told `closed`.
public enum CartConnectionState: Sendable, Hashable, CustomStringConvertible {
    /// No observer: no connection.
    case idle
    case connecting
    /// Subscribed (or in process): changes arrive as they are committed.
    case live
    /// The connection ended, or could not be made (why, typed); a remote store tries again with
    /// a backoff (0.1 s doubling to 5 s, with jitter) and resumes where it stood.
    case reconnecting(ConnectionProblem)
    /// The server refused the credentials (or every cart wanted): a remote store asks again
    /// after a pause (`FanoutSubscription.refusalPause`), or at once when observers change or a
    /// token provider has a new token. A cart refused to one observer while others are served
    /// is that observer's (`CartObserver.cartSource(_:didRefuse:because:)`).
    case refused(RemoteStoreError)
    /// The app suspended the store (`RemoteCartStore.suspend()`, going to the background):
    /// no connection, the carts held as they were, until it resumes.
    case suspended
    /// The store was closed: no connection, and no callback after this one.
    case closed

    public static func == (lhs: CartConnectionState, rhs: CartConnectionState) -> Bool {
        switch (lhs, rhs) {
        case (.idle, .idle), (.connecting, .connecting), (.live, .live), (.suspended, .suspended), (.closed, .closed): true
        case (.reconnecting(let a), .reconnecting(let b)): a == b
        case (.refused(let a), .refused(let b)): a.description == b.description
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(String(describing: self))
    }

    public var description: String {
        switch self {
        case .idle: "idle"
        case .connecting: "connecting"
        case .live: "live"
        case .reconnecting(let problem): "reconnecting (\(problem))"
        case .refused(let error): "refused (\(error))"
        case .suspended: "suspended"
        case .closed: "closed"
        }
    }
}

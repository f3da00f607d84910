/// One member's presence on one cart, as held by some node (server).
public struct PresenceRecord: Sendable, Hashable {
    /// The cart the member is looking at.
    public var cartID: String
    /// The subscriber's token's `sub`; `""` for a subscriber without one (anonymous).
    public var user: String
    /// The member's name, 1–64 characters of `A-Za-z0-9._-`; `(cartID, user, member)` is the key.
    public var member: String
    /// A JSON object's text, at most 1 024 bytes (the server checks it).
    public var state: String
    /// When the member joined, in milliseconds since 1970.
    public var since: Int64

    /// A member's presence.
    public init(cartID: String, user: String, member: String, state: String, since: Int64) {
        self.cartID = cartID
        self.user = user
        self.member = member
        self.state = state
        self.since = since
    }

    /// The record's key.
    public var key: PresenceKey { PresenceKey(cartID: cartID, user: user, member: member) }
}

/// The key of a `PresenceRecord`: one member of one user on one cart.
public struct PresenceKey: Sendable, Hashable {
    /// The cart.
    public var cartID: String
    /// The token's `sub`; `""` for an anonymous subscriber.
    public var user: String
    /// The member's name.
    public var member: String

    /// A key.
    public init(cartID: String, user: String, member: String) {
        self.cartID = cartID
        self.user = user
        self.member = member
    }
}

/// What the other live nodes hold now, as `PostgresPresence.views` tells it.
public struct PresenceView: Sendable, Equatable {
    /// Every member held by another node that is alive (its heartbeat within
    /// `PostgresPresence.nodeTimeout`).
    public var members: [PresenceKey: PresenceRecord]
    /// Members that another node removed recently (within the last 30 s), with the reason it
    /// gave (opaque here), and members of nodes that stopped their heartbeat, with reason
    /// `"node_lost"`. It only says *why* a member of an earlier view is gone: a key absent from
    /// both means `"node_lost"`.
    public var departed: [PresenceKey: String]

    /// A view.
    public init(members: [PresenceKey: PresenceRecord] = [:], departed: [PresenceKey: String] = [:]) {
        self.members = members
        self.departed = departed
    }
}

/// One member's presence on one cart, as held by some node (server).
struct PresenceRecord: Sendable, Hashable {
    /// The cart the member is looking at.
    var cartID: String
    /// The subscriber's token's `sub`; `""` for a subscriber without one (anonymous).
    var user: String
    /// The member's name, 1–64 characters of `A-Za-z0-9._-`; `(cartID, user, member)` is the key.
    var member: String
    /// A JSON object's text, at most 1 024 bytes (the server checks it).
    var state: String
    /// When the member joined, in milliseconds since 1970.
    var since: Int64

    /// A member's presence.
    init(cartID: String, user: String, member: String, state: String, since: Int64) {
        self.cartID = cartID
        self.user = user
        self.member = member
        self.state = state
        self.since = since
    }

    /// The record's key.
    var key: PresenceKey { PresenceKey(cartID: cartID, user: user, member: member) }
}

/// The key of a `PresenceRecord`: one member of one user on one cart.
struct PresenceKey: Sendable, Hashable {
    /// The cart.
    var cartID: String
    /// The token's `sub`; `""` for an anonymous subscriber.
    var user: String
    /// The member's name.
    var member: String
}

/// What the other live nodes hold now, as `PostgresPresence.views` tells it.
struct PresenceView: Sendable, Equatable {
    /// Every member held by another node that is alive (its heartbeat within
    /// `PostgresPresence.nodeTimeout`).
    var members: [PresenceKey: PresenceRecord]
    /// Members that another node removed recently (within the last 30 s), with the reason it
    /// gave (opaque here), and members of nodes that stopped their heartbeat, with reason
    /// `"node_lost"`. It only says *why* a member of an earlier view is gone: a key absent from
    /// both means `"node_lost"`.
    var departed: [PresenceKey: String]

    /// A view.
    init(members: [PresenceKey: PresenceRecord] = [:], departed: [PresenceKey: String] = [:]) {
        self.members = members
        self.departed = departed
    }
}

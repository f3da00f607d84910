/// `GET /carts`: every cart, the seq they reflect (follow the log after it), and the identity of
/// the database they were read from.
public struct CartsResponse: Codable, Sendable, Hashable {
    public var carts: [Cart]
    public var seq: Int64
    /// The server database's identity, as the welcome says it (`ServerMessage.Welcome.databaseID`):
    /// a copy of these carts kept across runs is of this database only. Nil from a server that
    /// does not say it.
    public var databaseID: String?

    public init(carts: [Cart], seq: Int64, databaseID: String? = nil) {
        self.carts = carts
        self.seq = seq
        self.databaseID = databaseID
    }

    enum CodingKeys: String, CodingKey {
        case carts, seq, databaseID = "databaseId"
    }
}

/// `GET /carts/{id}`: one cart, the seq it reflects, and the identity of the database it was
/// read from.
public struct CartResponse: Codable, Sendable, Hashable {
    public var cart: Cart
    public var seq: Int64
    /// The server database's identity (see `CartsResponse.databaseID`); nil from a server that
    /// does not say it.
    public var databaseID: String?

    public init(cart: Cart, seq: Int64, databaseID: String? = nil) {
        self.cart = cart
        self.seq = seq
        self.databaseID = databaseID
    }

    enum CodingKeys: String, CodingKey {
        case cart, seq, databaseID = "databaseId"
    }
}

/// `GET /carts/{id}/presence`: who is on the cart now, on every server, oldest first.
public struct PresenceResponse: Codable, Sendable, Hashable {
    public var cartID: String
    public var members: [PresenceMember]

    public init(cartID: String, members: [PresenceMember]) {
        self.cartID = cartID
        self.members = members
    }

    enum CodingKeys: String, CodingKey {
        case cartID = "cartId", members
    }
}

/// What every cart mutation answers: the cart after the change, the seq of the event it wrote,
/// and how many subscribers that event was queued to.
public struct MutationResponse: Codable, Sendable, Hashable {
    public var cart: Cart
    public var seq: Int64
    public var deliveredTo: Int

    public init(cart: Cart, seq: Int64, deliveredTo: Int) {
        self.cart = cart
        self.seq = seq
        self.deliveredTo = deliveredTo
    }
}

/// `GET /events`: one page of the event log.
public struct EventsPage: Codable, Sendable, Hashable {
    public var events: [CartEvent]
    /// The newest seq in the log when it was read.
    public var latestSeq: Int64
    /// Pass as `since` to continue: the last returned seq, or the asked one.
    public var nextSince: Int64
    /// The identity of the database the log is of (see `CartsResponse.databaseID`): `since` is a
    /// seq of this database's log only. Nil from a server that does not say it.
    public var databaseID: String?

    public init(events: [CartEvent], latestSeq: Int64, nextSince: Int64, databaseID: String? = nil) {
        self.events = events
        self.latestSeq = latestSeq
        self.nextSince = nextSince
        self.databaseID = databaseID
    }

    enum CodingKeys: String, CodingKey {
        case events, latestSeq, nextSince, databaseID = "databaseId"
    }
}

/// `GET /healthz`.
public struct HealthResponse: Codable, Sendable, Hashable {
    public var status: String

    public init(status: String = "ok") {
        self.status = status
    }
}

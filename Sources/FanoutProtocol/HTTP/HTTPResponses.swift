/// `GET /carts`: every cart, and the seq they reflect (follow the log after it).
public struct CartsResponse: Codable, Sendable, Hashable {
    public var carts: [Cart]
    public var seq: Int64

    public init(carts: [Cart], seq: Int64) {
        self.carts = carts
        self.seq = seq
    }
}

/// `GET /carts/{id}`: one cart, and the seq it reflects.
public struct CartResponse: Codable, Sendable, Hashable {
    public var cart: Cart
    public var seq: Int64

    public init(cart: Cart, seq: Int64) {
        self.cart = cart
        self.seq = seq
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

    public init(events: [CartEvent], latestSeq: Int64, nextSince: Int64) {
        self.events = events
        self.latestSeq = latestSeq
        self.nextSince = nextSince
    }
}

/// `GET /healthz`.
public struct HealthResponse: Codable, Sendable, Hashable {
    public var status: String

    public init(status: String = "ok") {
        self.status = status
    }
}

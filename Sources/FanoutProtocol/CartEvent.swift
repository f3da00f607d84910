import Foundation

/// One committed change to one cart, as recorded in the event log and delivered to observers.
///
/// `seq` is the event's position in the log: strictly increasing, without gaps, and the same
/// number for every observer, in-process or remote.
public struct CartEvent: Codable, Sendable, Hashable {
    public var seq: Int64
    public var cartID: String
    public var change: CartChange {
        didSet { encodedChange = nil }
    }
    /// The cart's version after this change.
    public var version: Int64
    public var committedAt: Date
    /// The `Idempotency-Key` of the write that made this event, when it was sent with one: a
    /// replica matches its pending write with the event that confirms it. Nil otherwise.
    public var idempotencyKey: String?
    /// `change` as JSON (`EventJSON.change`), when the store already made it: the bytes of its
    /// log row, reused for every message that carries the event. Not part of the event's value.
    public internal(set) var encodedChange: String?

    public init(
        seq: Int64, cartID: String, change: CartChange, version: Int64, committedAt: Date, idempotencyKey: String? = nil
    ) {
        self.seq = seq
        self.cartID = cartID
        self.change = change
        self.version = version
        self.committedAt = committedAt
        self.idempotencyKey = idempotencyKey
    }

    /// An event whose change is already encoded as JSON (read from, or written to, the log).
    public init(
        seq: Int64, cartID: String, change: CartChange, encodedChange: String, version: Int64, committedAt: Date,
        idempotencyKey: String? = nil
    ) {
        self.init(
            seq: seq, cartID: cartID, change: change, version: version, committedAt: committedAt, idempotencyKey: idempotencyKey)
        self.encodedChange = encodedChange
    }

    public static func == (lhs: CartEvent, rhs: CartEvent) -> Bool {
        lhs.seq == rhs.seq && lhs.cartID == rhs.cartID && lhs.change == rhs.change
            && lhs.version == rhs.version && lhs.committedAt == rhs.committedAt && lhs.idempotencyKey == rhs.idempotencyKey
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(seq)
        hasher.combine(cartID)
        hasher.combine(change)
        hasher.combine(version)
        hasher.combine(committedAt)
        hasher.combine(idempotencyKey)
    }

    public var kind: CartChange.Kind { change.kind }

    enum CodingKeys: String, CodingKey {
        case seq
        case cartID = "cartId"
        case kind
        case change
        case version
        case committedAt
        case idempotencyKey
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decode(Int64.self, forKey: .seq)
        cartID = try container.decode(String.self, forKey: .cartID)
        change = try container.decode(CartChange.self, forKey: .change)
        version = try container.decode(Int64.self, forKey: .version)
        committedAt = try container.decode(Date.self, forKey: .committedAt)
        idempotencyKey = try container.decodeIfPresent(String.self, forKey: .idempotencyKey)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(seq, forKey: .seq)
        try container.encode(cartID, forKey: .cartID)
        try container.encode(kind, forKey: .kind)
        try container.encode(change, forKey: .change)
        try container.encode(version, forKey: .version)
        try container.encode(committedAt, forKey: .committedAt)
        try container.encodeIfPresent(idempotencyKey, forKey: .idempotencyKey)
    }
}

/// What a committed event changed in its cart.
public enum CartChange: Sendable, Hashable {
    /// A line was added, or `addedQuantity` was added to an existing line; `item` is the line
    /// as it now stands (total quantity, and the price and name given with this add).
    case itemAdded(item: CartItem, addedQuantity: Int)
    /// The quantity of an existing line was set (never to 0: that is `itemRemoved`).
    case quantityChanged(sku: String, quantity: Int)
    /// A line was removed.
    case itemRemoved(sku: String)
    /// Every line was removed.
    case cartCleared

    /// The machine-readable name of a change, as stored in the log and sent on the wire.
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case itemAdded
        case quantityChanged
        case itemRemoved
        case cartCleared
    }

    public var kind: Kind {
        switch self {
        case .itemAdded: .itemAdded
        case .quantityChanged: .quantityChanged
        case .itemRemoved: .itemRemoved
        case .cartCleared: .cartCleared
        }
    }
}

extension CartChange: Codable {
    enum CodingKeys: String, CodingKey {
        case kind, item, addedQuantity, sku, quantity
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(Kind.self, forKey: .kind) {
        case .itemAdded:
            self = .itemAdded(
                item: try container.decode(CartItem.self, forKey: .item),
                addedQuantity: try container.decode(Int.self, forKey: .addedQuantity))
        case .quantityChanged:
            self = .quantityChanged(
                sku: try container.decode(String.self, forKey: .sku),
                quantity: try container.decode(Int.self, forKey: .quantity))
        case .itemRemoved:
            self = .itemRemoved(sku: try container.decode(String.self, forKey: .sku))
        case .cartCleared:
            self = .cartCleared
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(kind, forKey: .kind)
        switch self {
        case .itemAdded(let item, let addedQuantity):
            try container.encode(item, forKey: .item)
            try container.encode(addedQuantity, forKey: .addedQuantity)
        case .quantityChanged(let sku, let quantity):
            try container.encode(sku, forKey: .sku)
            try container.encode(quantity, forKey: .quantity)
        case .itemRemoved(let sku):
            try container.encode(sku, forKey: .sku)
        case .cartCleared:
            break
        }
    }
}

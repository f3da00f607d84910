/// A shopping cart as committed: its lines in the order they were added, and its version.
///
/// On the wire it also carries `totalCents` and `itemCount` (see `Cart+Codable.swift`), so the
/// HTTP answers and the WebSocket snapshot send one shape.
public struct Cart: Sendable, Hashable {
    public var id: String
    /// Grows by one with every committed change; a cart that was never changed has version 0.
    public var version: Int64
    public var items: [CartItem]

    public init(id: String, version: Int64 = 0, items: [CartItem] = []) {
        self.id = id
        self.version = version
        self.items = items
    }

    /// Sum of the line totals. At most `CartLimits.maxItemsPerCart` lines of at most 10¹³ each.
    public var totalCents: Int64 { items.reduce(0) { $0 + $1.lineTotalCents } }

    /// Total number of units over all lines.
    public var itemCount: Int { items.reduce(0) { $0 + $1.quantity } }

    /// Applies a committed event to this cart, as a client folding the event log would.
    ///
    /// Folding every event of the log from empty carts reproduces the store's carts exactly.
    /// Events of other carts are ignored.
    public mutating func apply(_ event: CartEvent) {
        guard event.cartID == id else { return }
        switch event.change {
        case .itemAdded(let item, _):
            if let index = items.firstIndex(where: { $0.sku == item.sku }) {
                items[index] = item
            } else {
                items.append(item)
            }
        case .quantityChanged(let sku, let quantity):
            if let index = items.firstIndex(where: { $0.sku == sku }) {
                items[index].quantity = quantity
            }
        case .itemRemoved(let sku):
            items.removeAll { $0.sku == sku }
        case .cartCleared:
            items.removeAll()
        }
        version = event.version
    }
}

/// The carts of the store at one point of the event log.
public struct CartSnapshot: Sendable, Hashable {
    /// The carts, ordered by id.
    public var carts: [Cart]
    /// The seq of the last event these carts reflect: resume the log after it.
    public var seq: Int64

    public init(carts: [Cart], seq: Int64) {
        self.carts = carts
        self.seq = seq
    }
}

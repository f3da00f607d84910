import Foundation
import GRDB

/// A row of `carts`, as reads decode it (writes are prepared statements, `SQLiteBackend.apply`).
struct CartRow: Decodable, FetchableRecord, TableRecord {
    static let databaseTableName = "carts"
    var id: String
    var version: Int64

    enum Columns {
        static let id = Column(CodingKeys.id)
        static let version = Column(CodingKeys.version)
    }
}

/// A row of `cart_items`.
struct CartItemRow: Decodable, FetchableRecord, TableRecord {
    static let databaseTableName = "cart_items"
    var cartID: String
    var sku: String
    var quantity: Int
    var unitPriceCents: Int
    var name: String?
    var position: Int64

    enum CodingKeys: String, CodingKey {
        case cartID = "cart_id"
        case sku
        case quantity
        case unitPriceCents = "unit_price_cents"
        case name
        case position
    }

    enum Columns {
        static let cartID = Column(CodingKeys.cartID)
        static let sku = Column(CodingKeys.sku)
        static let quantity = Column(CodingKeys.quantity)
        static let position = Column(CodingKeys.position)
    }

    var item: CartItem {
        CartItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name)
    }
}

/// A row of `cart_events`, the durable event log.
struct CartEventRow: Decodable, FetchableRecord, TableRecord {
    static let databaseTableName = "cart_events"
    var seq: Int64?
    var cartID: String
    var kind: String
    var change: String
    var cartVersion: Int64
    var committedAt: Int64

    enum CodingKeys: String, CodingKey {
        case seq
        case cartID = "cart_id"
        case kind
        case change
        case cartVersion = "cart_version"
        case committedAt = "committed_at"
    }

    enum Columns {
        static let seq = Column(CodingKeys.seq)
        static let cartID = Column(CodingKeys.cartID)
        static let committedAt = Column(CodingKeys.committedAt)
    }

    func event() throws -> CartEvent {
        guard let seq else { preconditionFailure("event row read without seq") }
        return try .stored(seq: seq, cartID: cartID, change: change, version: cartVersion, committedAt: committedAt)
    }
}

extension Date {
    init(millisecondsSince1970 milliseconds: Int64) {
        self.init(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    var millisecondsSince1970: Int64 {
        Int64((timeIntervalSince1970 * 1000).rounded(.down))
    }
}

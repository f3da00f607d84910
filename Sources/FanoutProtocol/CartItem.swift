/// One line of a cart: a product (`sku`), how many, and the price of one.
///
/// On the wire it also carries `lineTotalCents` (see `Cart+Codable.swift`).
public struct CartItem: Sendable, Hashable {
    public var sku: String
    public var quantity: Int
    public var unitPriceCents: Int
    public var name: String?

    public init(sku: String, quantity: Int, unitPriceCents: Int, name: String? = nil) {
        self.sku = sku
        self.quantity = quantity
        self.unitPriceCents = unitPriceCents
        self.name = name
    }

    /// `quantity × unitPriceCents`; cannot overflow within the store's limits (10 000 × 10⁹).
    public var lineTotalCents: Int64 { Int64(quantity) * Int64(unitPriceCents) }
}

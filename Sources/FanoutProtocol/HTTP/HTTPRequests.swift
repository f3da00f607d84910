/// The body of `POST /carts/{id}/items`: add a line, or add to the line of that sku.
public struct AddItemRequest: Codable, Sendable, Hashable {
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
}

/// The body of `PATCH /carts/{id}/items/{sku}`: the line's new quantity (0 removes it).
public struct SetQuantityRequest: Codable, Sendable, Hashable {
    public var quantity: Int

    public init(quantity: Int) {
        self.quantity = quantity
    }
}

import Foundation

/// One of the four writes a cart takes, as a value: what an app asks for, before the server
/// has decided what it makes of it.
public enum CartWrite: Sendable, Hashable, Codable {
    /// Adds `quantity` of `sku` (a new line, or more of an existing one, which takes this price
    /// and name).
    case addItem(sku: String, quantity: Int, unitPriceCents: Int, name: String?)
    /// Sets the quantity of an existing line; 0 removes it.
    case setQuantity(sku: String, quantity: Int)
    /// Removes a line.
    case removeItem(sku: String)
    /// Removes every line.
    case clear

    /// Checks the write's values against the server's input rules (`CartLimits`).
    public func check() throws(FanoutError) {
        switch self {
        case .addItem(let sku, let quantity, let unitPriceCents, let name):
            try CartLimits.checkSKU(sku)
            try CartLimits.checkQuantity(quantity)
            try CartLimits.checkPrice(unitPriceCents)
            try CartLimits.checkName(name)
        case .setQuantity(let sku, let quantity):
            try CartLimits.checkSKU(sku)
            try CartLimits.checkQuantity(quantity, allowZero: true)
        case .removeItem(let sku):
            try CartLimits.checkSKU(sku)
        case .clear:
            break
        }
    }

    /// Whether the write needs the cart to exist (`cart_not_found` otherwise).
    public var needsExistingCart: Bool {
        if case .addItem = self { return false }
        return true
    }

    /// The change this write makes to `cart`, by the rules a store commits it with; throws the
    /// error the store would refuse it with.
    public func change(to cart: Cart) throws(FanoutError) -> CartChange {
        switch self {
        case .addItem(let sku, let quantity, let unitPriceCents, let name):
            if let line = cart.items.first(where: { $0.sku == sku }) {
                let total = line.quantity + quantity
                guard total <= CartLimits.quantityRange.upperBound else {
                    throw FanoutError(
                        .quantityOverflow,
                        "cart \(cart.id) has \(line.quantity) of \(sku); adding \(quantity) would exceed \(CartLimits.quantityRange.upperBound)"
                    )
                }
                return .itemAdded(
                    item: CartItem(sku: sku, quantity: total, unitPriceCents: unitPriceCents, name: name), addedQuantity: quantity)
            }
            guard cart.items.count < CartLimits.maxItemsPerCart else {
                throw FanoutError(.tooManyItems, "cart \(cart.id) already has \(CartLimits.maxItemsPerCart) lines")
            }
            return .itemAdded(
                item: CartItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name), addedQuantity: quantity)
        case .setQuantity(let sku, let quantity):
            try Self.requireLine(sku, in: cart)
            return quantity == 0 ? .itemRemoved(sku: sku) : .quantityChanged(sku: sku, quantity: quantity)
        case .removeItem(let sku):
            try Self.requireLine(sku, in: cart)
            return .itemRemoved(sku: sku)
        case .clear:
            return .cartCleared
        }
    }

    private static func requireLine(_ sku: String, in cart: Cart) throws(FanoutError) {
        guard cart.items.contains(where: { $0.sku == sku }) else {
            throw FanoutError(.itemNotFound, "cart \(cart.id) has no item \(sku)")
        }
    }
}

/// Carts and lines on the wire carry their derived figures (`totalCents`, `itemCount`,
/// `lineTotalCents`), so a client need not compute them, and every answer and snapshot has the
/// shape docs/PROTOCOL.md gives. Decoding recomputes them; when a message carries them they must
/// agree, so a message that contradicts itself is refused rather than shown.
extension Cart: Codable {
    enum CodingKeys: String, CodingKey {
        case id, version, items, totalCents, itemCount
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            id: try container.decode(String.self, forKey: .id),
            version: try container.decode(Int64.self, forKey: .version),
            items: try container.decode([CartItem].self, forKey: .items))
        try container.checkDerived(totalCents, forKey: .totalCents)
        try container.checkDerived(itemCount, forKey: .itemCount)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(version, forKey: .version)
        try container.encode(items, forKey: .items)
        try container.encode(totalCents, forKey: .totalCents)
        try container.encode(itemCount, forKey: .itemCount)
    }
}

extension CartItem: Codable {
    enum CodingKeys: String, CodingKey {
        case sku, quantity, unitPriceCents, name, lineTotalCents
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            sku: try container.decode(String.self, forKey: .sku),
            quantity: try container.decode(Int.self, forKey: .quantity),
            unitPriceCents: try container.decode(Int.self, forKey: .unitPriceCents),
            name: try container.decodeIfPresent(String.self, forKey: .name))
        // Absent in event-log rows written before lines carried it.
        try container.checkDerived(lineTotalCents, forKey: .lineTotalCents)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sku, forKey: .sku)
        try container.encode(quantity, forKey: .quantity)
        try container.encode(unitPriceCents, forKey: .unitPriceCents)
        try container.encodeIfPresent(name, forKey: .name)
        try container.encode(lineTotalCents, forKey: .lineTotalCents)
    }
}

extension KeyedDecodingContainer {
    /// A derived figure may be absent; when present it must equal what the other fields give.
    func checkDerived<Value: Decodable & Equatable>(_ computed: Value, forKey key: Key) throws {
        guard let sent = try decodeIfPresent(Value.self, forKey: key), sent != computed else { return }
        throw DecodingError.dataCorruptedError(
            forKey: key, in: self, debugDescription: "\(key.stringValue) is \(sent), but the other fields give \(computed)")
    }
}

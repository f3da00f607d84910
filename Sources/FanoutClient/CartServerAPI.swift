import FanoutProtocol
import Foundation
import NIOHTTP1

/// A fanout-server's HTTP API: the carts as they are now, and typed writes. Bodies and answers
/// are FanoutProtocol's types, the ones the server encodes; a refusal is a `RemoteStoreError`
/// carrying the server's error code.
public struct CartServerAPI: Sendable {
    /// `http://host:port`
    public let baseURL: URL
    let credentials: Credentials
    /// The certificates an `https://` server may present.
    let trust: ServerTrust

    /// - Parameters:
    ///   - baseURL: `http://host:port` (or `https://`) of the fanout-server.
    ///   - credentials: the token, or how to get a fresh one before each request.
    ///   - trust: for `https://`, the certificate authorities to trust: the system's, or the
    ///     app's own (`ServerTrust.certificates(pemFile:)`).
    public init(baseURL: URL, credentials: Credentials = .none, trust: ServerTrust = .system) {
        self.baseURL = baseURL
        self.credentials = credentials
        self.trust = trust
    }

    /// What a write answers: the cart after it, the seq of its event, and how many subscribers
    /// of the server it was queued to.
    public typealias WriteResult = MutationResponse

    /// Every cart, and the seq they reflect.
    public func carts() async throws -> CartsResponse {
        try await send("GET", "/carts", as: CartsResponse.self)
    }

    /// One cart, and the seq it reflects. Throws `cart_not_found` for a cart without events.
    public func cart(_ id: String) async throws -> CartResponse {
        try await send("GET", "/carts/\(try Self.segment(id))", as: CartResponse.self)
    }

    /// Adds `quantity` of `sku` to the cart (creating the line, or the cart).
    ///
    /// - Parameters:
    ///   - sku: the line's SKU.
    ///   - quantity: how many to add.
    ///   - unitPriceCents: the line's price in cents.
    ///   - name: the line's display name.
    ///   - cartID: the cart.
    ///   - expectedVersion: the version the cart must be at (0: must not exist yet).
    ///   - idempotencyKey: sent as `Idempotency-Key`: the server makes the change once for this
    ///     key, and answers a repeat (a retry after a lost answer) with the first answer; the key
    ///     with another change is refused `idempotency_key_reused`. 1–255 characters `!`…`~`,
    ///     checked before sending. The same for every write.
    public func addItem(
        _ sku: String, quantity: Int, unitPriceCents: Int, name: String? = nil, to cartID: String, expectedVersion: Int64? = nil,
        idempotencyKey: String? = nil
    ) async throws -> WriteResult {
        try await write(
            .addItem(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name), to: cartID,
            expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Sets the quantity of a line (0 removes it).
    public func setQuantity(
        of sku: String, to quantity: Int, in cartID: String, expectedVersion: Int64? = nil, idempotencyKey: String? = nil
    ) async throws -> WriteResult {
        try await write(
            .setQuantity(sku: sku, quantity: quantity), to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Removes a line.
    public func removeItem(
        _ sku: String, from cartID: String, expectedVersion: Int64? = nil, idempotencyKey: String? = nil
    ) async throws -> WriteResult {
        try await write(.removeItem(sku: sku), to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Empties a cart.
    public func clear(_ cartID: String, expectedVersion: Int64? = nil, idempotencyKey: String? = nil) async throws -> WriteResult {
        try await write(.clear, to: cartID, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey)
    }

    /// Sends one write: its values are checked against `CartLimits` first (`.invalid`, unsent).
    ///
    /// - Parameters:
    ///   - write: what to do.
    ///   - cartID: the cart.
    ///   - expectedVersion: sent as `If-Match`.
    ///   - idempotencyKey: sent as `Idempotency-Key`.
    public func write(
        _ write: CartWrite, to cartID: String, expectedVersion: Int64? = nil, idempotencyKey: String? = nil
    ) async throws -> WriteResult {
        try Self.check { () throws(FanoutError) in try write.check() }
        let cart = try Self.segment(cartID)
        let (method, path, body): (String, String, (any Encodable)?) =
            switch write {
            case .addItem(let sku, let quantity, let unitPriceCents, let name):
                ("POST", "/carts/\(cart)/items", AddItemRequest(sku: sku, quantity: quantity, unitPriceCents: unitPriceCents, name: name))
            case .setQuantity(let sku, let quantity):
                ("PATCH", "/carts/\(cart)/items/\(try Self.segment(sku, isSKU: true))", SetQuantityRequest(quantity: quantity))
            case .removeItem(let sku):
                ("DELETE", "/carts/\(cart)/items/\(try Self.segment(sku, isSKU: true))", nil)
            case .clear:
                ("DELETE", "/carts/\(cart)", nil)
            }
        return try await send(
            method, path, body: body, expectedVersion: expectedVersion, idempotencyKey: idempotencyKey, as: WriteResult.self)
    }

    /// Sends a request and decodes the answer of a 2xx.
    ///
    /// - Parameters:
    ///   - expectedVersion: sent as `If-Match`.
    ///   - idempotencyKey: sent as `Idempotency-Key`, once checked (`invalid` otherwise, unsent).
    /// - Throws: `RemoteStoreError`.
    package func send<Answer: Decodable>(
        _ method: String, _ path: String, body: (any Encodable)? = nil, expectedVersion: Int64? = nil, idempotencyKey: String? = nil,
        as answer: Answer.Type
    ) async throws -> Answer {
        guard let url = URL(string: path, relativeTo: baseURL)?.absoluteURL else {
            throw RemoteStoreError.unexpectedAnswer("cannot build a URL from \(baseURL) and \(path)")
        }
        if let idempotencyKey { try Self.check { () throws(FanoutError) in try CartLimits.checkIdempotencyKey(idempotencyKey) } }
        var headers: [(String, String)] = [("Accept", "application/json")]
        if let token = try await credentials.token() { headers.append(("Authorization", "Bearer \(token)")) }
        if let expectedVersion { headers.append(("If-Match", "\(expectedVersion)")) }
        if let idempotencyKey { headers.append(("Idempotency-Key", idempotencyKey)) }
        var bytes: [UInt8]?
        if let body {
            bytes = Array(try FanoutJSON.encoder().encode(body))
            headers.append(("Content-Type", "application/json"))
        }
        let (status, data) = try await HTTPExchange.send(HTTPMethod(rawValue: method), url, trust: trust, headers: headers, body: bytes)
        guard (200..<300).contains(status) else {
            throw RemoteStoreError.answer(status: status, body: data)
        }
        do {
            return try FanoutJSON.decoder().decode(Answer.self, from: Data(data))
        } catch {
            throw RemoteStoreError.unexpectedAnswer("the answer to \(method) \(path) is not what fanout-server sends: \(error)")
        }
    }

    /// Runs the server's input rules (`CartLimits`) before anything is sent: a value they refuse
    /// throws `RemoteStoreError.invalid` with the code the server would answer.
    static func check(_ rules: () throws(FanoutError) -> Void) throws(RemoteStoreError) {
        do {
            try rules()
        } catch {
            throw .invalid(error)
        }
    }

    /// A cart id or SKU as a path segment: checked against the server's rules first (they allow
    /// nothing that needs escaping), so a bad one is refused here, unsent.
    static func segment(_ text: String, isSKU: Bool = false) throws(RemoteStoreError) -> String {
        do {
            if isSKU { try CartLimits.checkSKU(text) } else { try CartLimits.checkCartID(text) }
        } catch {
            throw .invalid(error)
        }
        return text
    }

    /// One cart as it is now; a cart without events is empty at version 0.
    func currentCart(_ id: String) async throws -> Cart {
        do {
            return try await cart(id).cart
        } catch let error as RemoteStoreError where error.code == .cartNotFound {
            return Cart(id: id)
        }
    }
}

extension CartServerAPI {
    /// `ws://host:port/subscribe` for `http://host:port` (`wss` for `https`).
    var subscribeURL: URL? {
        guard var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false) else { return nil }
        components.scheme = components.scheme == "https" ? "wss" : "ws"
        components.path = "/subscribe"
        return components.url
    }
}

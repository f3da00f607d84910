import CartStore
import Foundation
import HTTPTypes
import Hummingbird

/// The cart API: read carts, and change them (each change one event). Bodies and answers are
/// FanoutProtocol's types, the ones `fanout-client` decodes. Each handler holds the request to
/// its credential's `Grant` (set by `AccessMiddleware`) before it touches the store: a list is
/// of the carts it may see, a read or change of another cart is 403. A change sent with an
/// `Idempotency-Key` is made once per key and credential; a repeat gets the first answer again,
/// marked `Idempotent-Replayed: true` (see `IdempotencyKey`).
struct CartController: Sendable {
    let store: CartStore
    let hub: FanoutHub

    func addRoutes(to group: RouterGroup<FanoutRequestContext>) {
        group.get(use: list)
        group.get(":cartID", use: show)
        group.get(":cartID/presence", use: presence)
        group.delete(":cartID", use: clear)
        group.post(":cartID/items", use: add)
        group.patch(":cartID/items/:sku", use: setQuantity)
        group.delete(":cartID/items/:sku", use: remove)
    }

    // MARK: Handlers

    @Sendable func list(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let snapshot = try await store.snapshot(of: try context.grant.readable(nil))
        return await CartsResponse(carts: snapshot.carts, seq: snapshot.seq, databaseID: store.databaseID).response(
            holding: snapshot.carts.count)
    }

    @Sendable func show(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        let snapshot = try await store.snapshot(of: try context.grant.readable([cartID]))
        guard let cart = snapshot.carts.first else {
            throw APIError(.cartNotFound, "no cart \(cartID)")
        }
        var response = try CartResponse(cart: cart, seq: snapshot.seq, databaseID: store.databaseID).response(
            from: request, context: context)
        response.headers[.eTag] = "\"\(cart.version)\""
        return response
    }

    /// Who is on the cart now: read as the cart is (its read access), from the hub, without
    /// the store.
    @Sendable func presence(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try CartLimits.checkCartID(cartID)
        _ = try context.grant.readable([cartID])
        return try PresenceResponse(cartID: cartID, members: hub.presence.members(of: cartID)).response(from: request, context: context)
    }

    @Sendable func add(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let key = try Self.idempotencyKey(request, context: context)
        let body = try await request.decodeJSON(AddItemRequest.self, context: context)
        let commit = try await store.addItem(
            cartID: cartID, sku: body.sku, quantity: body.quantity, unitPriceCents: body.unitPriceCents,
            name: body.name, expectedVersion: try Self.expectedVersion(request), idempotencyKey: key)
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func setQuantity(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let sku = try context.parameters.require("sku")
        let key = try Self.idempotencyKey(request, context: context)
        let body = try await request.decodeJSON(SetQuantityRequest.self, context: context)
        let commit = try await store.setQuantity(
            cartID: cartID, sku: sku, quantity: body.quantity, expectedVersion: try Self.expectedVersion(request),
            idempotencyKey: key)
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func remove(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let sku = try context.parameters.require("sku")
        let commit = try await store.removeItem(
            cartID: cartID, sku: sku, expectedVersion: try Self.expectedVersion(request),
            idempotencyKey: try Self.idempotencyKey(request, context: context))
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func clear(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let commit = try await store.clearCart(
            cartID: cartID, expectedVersion: try Self.expectedVersion(request),
            idempotencyKey: try Self.idempotencyKey(request, context: context))
        return try respond(to: commit, request: request, context: context)
    }

    private func respond(to commit: CartCommit, request: Request, context: FanoutRequestContext) throws -> Response {
        // The hub heard the event before the store returned, so its count is final here.
        let body = MutationResponse(
            cart: commit.cart, seq: commit.event.seq, deliveredTo: hub.deliveredCount(seq: commit.event.seq))
        var response = try body.response(from: request, context: context)
        response.headers[.eTag] = "\"\(commit.cart.version)\""
        if commit.isReplay { response.headers[.idempotentReplayed] = "true" }
        return response
    }

    /// The request's `Idempotency-Key`, in the scope of its credential (a signed token's `sub`;
    /// "" for the operator's token or an open server): one user's key never answers another's.
    /// The key is the field's value, Stripe's form (`Idempotency-Key: 8e03…`), or the httpapi
    /// draft's string (`Idempotency-Key: "8e03…"`), whose quotes are not part of the key. More
    /// than one such field, or a key outside the rule, is 400 `invalid_idempotency_key`.
    static func idempotencyKey(_ request: Request, context: FanoutRequestContext) throws -> IdempotencyKey? {
        let values = request.headers[values: .idempotencyKey]
        guard var key = values.first else { return nil }
        guard values.count == 1 else {
            throw APIError(.invalidIdempotencyKey, "send one Idempotency-Key field (got \(values.count))")
        }
        if key.utf8.count >= 2, key.hasPrefix("\""), key.hasSuffix("\"") { key = String(key.dropFirst().dropLast()) }
        return try IdempotencyKey(key, scope: context.grant.subject ?? "")
    }

    /// `If-Match: 3` or `If-Match: "3"` (the ETag the API returns): the cart must be at that
    /// version, else 412.
    static func expectedVersion(_ request: Request) throws -> Int64? {
        guard var value = request.headers[.ifMatch] else { return nil }
        value = value.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
            value = String(value.dropFirst().dropLast())
        }
        guard let version = Int64(value), version >= 0 else {
            throw APIError.malformed("If-Match must be a cart version, like \"3\" (got \(value.prefix(40)))")
        }
        return version
    }
}

extension HTTPField.Name {
    /// The key of an exactly-once change (draft-ietf-httpapi-idempotency-key-header).
    static let idempotencyKey = Self("Idempotency-Key")!
    /// On the answer to a change that repeated a key: the first answer, given again (Stripe's name).
    static let idempotentReplayed = Self("Idempotent-Replayed")!
}

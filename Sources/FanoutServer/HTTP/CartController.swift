import CartStore
import Foundation
import Hummingbird

/// The cart API: read carts, and change them (each change one event). Bodies and answers are
/// FanoutProtocol's types, the ones `fanout-client` decodes. Each handler holds the request to
/// its credential's `Grant` (set by `AccessMiddleware`) before it touches the store: a list is
/// of the carts it may see, a read or change of another cart is 403.
struct CartController: Sendable {
    let store: CartStore
    let hub: FanoutHub

    func addRoutes(to group: RouterGroup<FanoutRequestContext>) {
        group.get(use: list)
        group.get(":cartID", use: show)
        group.delete(":cartID", use: clear)
        group.post(":cartID/items", use: add)
        group.patch(":cartID/items/:sku", use: setQuantity)
        group.delete(":cartID/items/:sku", use: remove)
    }

    // MARK: Handlers

    @Sendable func list(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let snapshot = try await store.snapshot(of: try context.grant.readable(nil))
        return await CartsResponse(carts: snapshot.carts, seq: snapshot.seq).response(holding: snapshot.carts.count)
    }

    @Sendable func show(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        let snapshot = try await store.snapshot(of: try context.grant.readable([cartID]))
        guard let cart = snapshot.carts.first else {
            throw APIError(.cartNotFound, "no cart \(cartID)")
        }
        var response = try CartResponse(cart: cart, seq: snapshot.seq).response(from: request, context: context)
        response.headers[.eTag] = "\"\(cart.version)\""
        return response
    }

    @Sendable func add(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let body = try await request.decodeJSON(AddItemRequest.self, context: context)
        let commit = try await store.addItem(
            cartID: cartID, sku: body.sku, quantity: body.quantity, unitPriceCents: body.unitPriceCents,
            name: body.name, expectedVersion: try Self.expectedVersion(request))
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func setQuantity(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let sku = try context.parameters.require("sku")
        let body = try await request.decodeJSON(SetQuantityRequest.self, context: context)
        let commit = try await store.setQuantity(
            cartID: cartID, sku: sku, quantity: body.quantity, expectedVersion: try Self.expectedVersion(request))
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func remove(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let sku = try context.parameters.require("sku")
        let commit = try await store.removeItem(cartID: cartID, sku: sku, expectedVersion: try Self.expectedVersion(request))
        return try respond(to: commit, request: request, context: context)
    }

    @Sendable func clear(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let cartID = try context.parameters.require("cartID")
        try context.grant.checkWrite(cartID)
        let commit = try await store.clearCart(cartID: cartID, expectedVersion: try Self.expectedVersion(request))
        return try respond(to: commit, request: request, context: context)
    }

    private func respond(to commit: CartCommit, request: Request, context: FanoutRequestContext) throws -> Response {
        // The hub heard the event before the store returned, so its count is final here.
        let body = MutationResponse(
            cart: commit.cart, seq: commit.event.seq, deliveredTo: hub.deliveredCount(seq: commit.event.seq))
        var response = try body.response(from: request, context: context)
        response.headers[.eTag] = "\"\(commit.cart.version)\""
        return response
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

import FanoutProtocol
import Foundation

// Exactly-once writes: the key, what it is remembered with, how a request is told apart, and
// how long keys are kept.

/// The key of an exactly-once write (HTTP's `Idempotency-Key`), and whose key it is.
///
/// A mutation made with a key is remembered with its answer, in the transaction that commits
/// it: the same key with the same request, later (also after a restart, or on another server
/// of a PostgreSQL database), answers the first commit again (`CartCommit.isReplay`) and writes
/// nothing; the same key with another request is refused with `idempotency_key_reused`. Keys
/// are per `scope`: the same key in two scopes is two keys. The server's scope is a signed
/// token's `sub` (empty for the operator's token), so one user's key never answers another's.
///
/// A refused mutation (a version conflict, a missing line, a validator's veto) is not
/// remembered: it wrote nothing, and the same key may be sent again.
public struct IdempotencyKey: Sendable, Hashable {
    /// The key as the client sent it: 1–255 characters `!`…`~` (`CartLimits.checkIdempotencyKey`).
    public let key: String
    /// Whose key it is ("" for everyone's).
    public let scope: String

    /// - Throws: `invalid_idempotency_key` when `key` breaks the rule.
    public init(_ key: String, scope: String = "") throws(CartStoreError) {
        try CartLimits.checkIdempotencyKey(key)
        self.key = key
        self.scope = scope
    }
}

/// A mutation's idempotency key with what identifies the request it came with: the route, the
/// cart, every argument and the expected version, as canonical JSON
/// (`CartWrite.fingerprint(cartID:expectedVersion:)`). The fingerprint is the request
/// itself rather than a hash of it: at most about 1 KiB (the arguments' limits), compared
/// exactly, and nothing but Foundation needed to make it.
package struct KeyedRequest: Sendable, Hashable {
    package let key: IdempotencyKey
    package let fingerprint: String
}

/// A keyed mutation's commit as both engines keep it beside its key: its fingerprint, and the
/// commit (the event, with its seq, and the cart after it) as JSON, from which the answer is
/// given again exactly.
package struct RememberedCommit: Sendable {
    package let fingerprint: String
    package let commit: String

    package init(fingerprint: String, commit: String) {
        self.fingerprint = fingerprint
        self.commit = commit
    }

    /// What a mutation made with `request`'s key is answered: the remembered commit as a
    /// replay when the request is the same; `idempotency_key_reused` when it is not.
    package func answer(to request: KeyedRequest) throws -> CartCommit {
        guard fingerprint == request.fingerprint else {
            throw CartStoreError(
                .idempotencyKeyReused,
                "the Idempotency-Key \(request.key.key) was used for another request (another cart, route or body); nothing was written"
            )
        }
        var commit = try rememberedDecoder.decode(RememberedJSON.self, from: Data(commit.utf8)).commit
        commit.isReplay = true
        return commit
    }

    /// `{"cart":Cart,"event":Event}`: the commit, as it is kept.
    package static func json(_ commit: CartCommit) -> String {
        var json = JSONBytes(capacity: 512)
        json.raw(#"{"cart":"#)
        json.cart(commit.cart)
        json.raw(#","event":"#)
        json.event(commit.event, asMessage: false)
        json.raw("}")
        return String(decoding: json.bytes, as: UTF8.self)
    }
}

private struct RememberedJSON: Decodable {
    let cart: Cart
    let event: CartEvent
    var commit: CartCommit { CartCommit(cart: cart, event: event) }
}

private let rememberedDecoder = FanoutJSON.decoder()

/// A write as its caller asked for it, before the cart is read: what a key's fingerprint is
/// made of.
extension CartWrite {
    /// The request as canonical JSON: `["addItem","cart","sku",2,150,"name"|null,3|null]`,
    /// the route, the cart, every argument in a fixed order, and the expected version.
    func fingerprint(cartID: String, expectedVersion: Int64?) -> String {
        var json = JSONBytes(capacity: 160)
        json.raw("[")
        switch self {
        case .addItem(let sku, let quantity, let price, let name):
            Self.strings(&json, "addItem", cartID, sku)
            json.raw(",")
            json.int(quantity)
            json.raw(",")
            json.int(price)
            json.raw(",")
            if let name { json.string(name) } else { json.raw("null") }
        case .setQuantity(let sku, let quantity):
            Self.strings(&json, "setQuantity", cartID, sku)
            json.raw(",")
            json.int(quantity)
        case .removeItem(let sku):
            Self.strings(&json, "removeItem", cartID, sku)
        case .clear:
            Self.strings(&json, "clearCart", cartID)
        }
        json.raw(",")
        if let expectedVersion { json.int(expectedVersion) } else { json.raw("null") }
        json.raw("]")
        return String(decoding: json.bytes, as: UTF8.self)
    }

    private static func strings(_ json: inout JSONBytes, _ values: String...) {
        for (index, value) in values.enumerated() {
            if index > 0 { json.raw(",") }
            json.string(value)
        }
    }
}

extension CartStore {
    /// Forgets the idempotency keys made before `date`, and all but the newest `count` of those
    /// left: a mutation repeating a forgotten key is made again. Returns how many were
    /// forgotten. Keys are kept apart from the log: pruning events keeps every key's answer,
    /// and pruning keys keeps every event (with its key).
    @discardableResult
    public func pruneIdempotencyKeys(createdBefore date: Date, keepingNewest count: Int) async throws -> Int {
        guard count >= 0 else { throw CartStoreError(.invalidLimit, "keep count must be ≥ 0 (got \(count))") }
        return try await backend.pruneIdempotencyKeys(createdBefore: date, keepingNewest: count)
    }

    /// How many idempotency keys are kept now (for an operator's figures: it counts them).
    public func idempotencyKeyCount() async throws -> Int {
        try await backend.idempotencyKeyCount()
    }
}

import FanoutProtocol
import Foundation

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

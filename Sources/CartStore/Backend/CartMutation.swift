import Foundation

/// One change asked of the store, before any engine touches it: which cart, what it must be,
/// and how to decide the change from the cart as stored. `plan` turns it into what to write;
/// the engine only reads the cart and writes the plan, inside its transaction.
package struct CartMutation: Sendable {
    package let cartID: String
    /// The version the cart must be at (0: must not exist yet), or nil for any.
    package let expectedVersion: Int64?
    /// Refuse with `cartNotFound` when the cart was never changed.
    package let mustExist: Bool
    package let decide: @Sendable (Cart) throws -> CartChange
    /// The store's validators: they see the change before anything is written, and a throw
    /// refuses it. The engine runs them inside its transaction through `plan`, never the store.
    package let validate: @Sendable (CartChangeProposal) throws -> Void
    /// The key it was made with: the engine looks it up first, in the same transaction, and
    /// keeps it with the commit (`RememberedCommit`).
    package let keyed: KeyedRequest?

    /// What the mutation writes, given the cart as stored (nil: none yet): the change, its JSON
    /// (the log row's and every message's), the event without its seq, and the cart after.
    /// Throws when refused (missing cart, version conflict, the decision's own refusal, or a
    /// validator's veto); then nothing may be written.
    package func plan(stored: Cart?, committedAt: Int64) throws -> MutationPlan {
        let before = stored ?? Cart(id: cartID)
        if mustExist && before.version == 0 {
            throw CartStoreError(.cartNotFound, "no cart \(cartID)")
        }
        if let expectedVersion, expectedVersion != before.version {
            throw CartStoreError(
                .versionConflict, "cart \(cartID) is at version \(before.version), not \(expectedVersion)",
                details: ["currentVersion": before.version])
        }
        let change = try decide(before)
        let encodedChange = EventJSON.change(change)
        let event = CartEvent(
            seq: 0, cartID: cartID, change: change, encodedChange: encodedChange,
            version: before.version + 1, committedAt: Date(millisecondsSince1970: committedAt), idempotencyKey: keyed?.key.key)
        var after = before
        after.apply(event)
        // Validators see the outcome before anything is written.
        try validate(CartChangeProposal(cartID: cartID, change: change, before: before, after: after))
        return MutationPlan(event: event, encodedChange: encodedChange, committedAt: committedAt, after: after)
    }
}

/// What one mutation writes: the event (its seq is the engine's to assign), and the cart after.
package struct MutationPlan: Sendable {
    package let event: CartEvent
    package let encodedChange: String
    package let committedAt: Int64
    package let after: Cart

    /// The commit, once the engine has given the event its seq.
    package func committed(seq: Int64) -> CartCommit {
        var event = self.event
        event.seq = seq
        return CartCommit(cart: after, event: event)
    }
}

extension CartMutation {
    /// What the engine keeps beside the mutation's key, when it has one, once `commit` is made.
    package func remembered(_ commit: CartCommit) -> (KeyedRequest, RememberedCommit)? {
        keyed.map { ($0, RememberedCommit(fingerprint: $0.fingerprint, commit: RememberedCommit.json(commit))) }
    }
}

import FanoutProtocol

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

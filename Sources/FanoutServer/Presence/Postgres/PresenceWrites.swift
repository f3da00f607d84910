import FanoutProtocol

/// What a node holds, and what it has yet to write to the database: the one buffer between the
/// hub's calls (`PostgresPresence.set`, `remove`) and the writer.
///
/// Pending wishes coalesce per key (the newest replaces an older one), so there is at most one
/// per key held or left since the last write. Leaves of keys no longer held are the only part
/// that can grow while the database is away: past `leaveLimit` they are dropped, and the next
/// write rewrites everything instead, which also marks every other row of the node as left
/// (`nodeLost`, the reason a key absent from a view has anyway).
struct PresenceWrites: Sendable {
    typealias Key = PresenceRegistry.Key

    /// A key's newest wish.
    enum Wish: Sendable, Equatable {
        case hold(PresenceMember)
        case leave(reason: PresenceLeaveReason)
    }

    /// What one write takes: the pending wishes, what is held, and whether the whole of it is to
    /// be written (the database's rows of the node made exactly `held`).
    struct Batch: Sendable {
        var pending: [Key: Wish]
        var held: [Key: PresenceMember]
        var rewrite: Bool

        /// What to write: the pending wishes, or with `everything` every key held and the
        /// pending leaves. The holds come in key order, so that two nodes taking keys over from
        /// each other lock their rows in the same order.
        func rows(everything: Bool) -> (holds: [PresenceRow], leaves: [(Key, PresenceLeaveReason)]) {
            let leaves = pending.compactMap { key, wish -> (Key, PresenceLeaveReason)? in
                if case .leave(let reason) = wish { (key, reason) } else { nil }
            }
            let holds =
                everything
                ? held.map { PresenceRow($0.value, cart: $0.key.cart) }
                : pending.compactMap { key, wish -> PresenceRow? in
                    if case .hold(let member) = wish { PresenceRow(member, cart: key.cart) } else { nil }
                }
            return (holds.sorted { ($0.cart, $0.user, $0.member) < ($1.cart, $1.user, $1.member) }, leaves)
        }
    }

    /// The most pending leaves kept while they cannot be written.
    static let leaveLimit = 10_000

    private(set) var held: [Key: PresenceMember] = [:]
    private(set) var pending: [Key: Wish] = [:]
    private var leaves = 0
    /// The next write rewrites everything (a write failed, or leaves were dropped).
    private(set) var mustRewrite = true

    mutating func set(_ member: PresenceMember, cart: String) {
        let key = Key(cart: cart, member.id)
        held[key] = member
        wish(.hold(member), for: key)
    }

    mutating func remove(_ key: Key, reason: PresenceLeaveReason) {
        held[key] = nil
        wish(.leave(reason: reason), for: key)
    }

    /// The next write rewrites everything (the database lost this node's rows).
    mutating func rewriteNext() {
        mustRewrite = true
    }

    /// Whether a write has anything to do beyond the heartbeat.
    var hasWork: Bool { !pending.isEmpty || mustRewrite }

    /// Takes what the next write is to write; `putBack` it if that write fails.
    mutating func take() -> Batch {
        defer {
            pending.removeAll()
            leaves = 0
            mustRewrite = false
        }
        return Batch(pending: pending, held: held, rewrite: mustRewrite)
    }

    /// A write of `batch` failed: its wishes are pending again, unless a newer wish for the same
    /// key came meanwhile, and the next write rewrites everything (what reached the database
    /// before the failure is not known).
    mutating func putBack(_ batch: Batch) {
        for (key, wish) in batch.pending where pending[key] == nil {
            self.wish(wish, for: key)
        }
        mustRewrite = true
    }

    private mutating func wish(_ wish: Wish, for key: Key) {
        let previous = pending.updateValue(wish, forKey: key)
        if case .leave = previous { leaves -= 1 }
        guard case .leave = wish else { return }
        leaves += 1
        if leaves > Self.leaveLimit {
            // Full: the leaves are dropped; the rewrite marks their rows left.
            pending = pending.filter { _, wish in if case .leave = wish { false } else { true } }
            leaves = 0
            mustRewrite = true
        }
    }
}

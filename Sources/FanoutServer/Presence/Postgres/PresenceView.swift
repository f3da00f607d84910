import FanoutProtocol
import Foundation

/// What the other live nodes hold now, as `PostgresPresence.views` tells it, in the registry's
/// own words: members by their place (`PresenceRegistry.Key`), and why the recently gone ones
/// went.
struct PresenceView: Sendable, Equatable {
    /// Every member held by another node that is alive (its heartbeat within
    /// `PostgresPresence.nodeTimeout`).
    var members: [PresenceRegistry.Key: PresenceMember] = [:]
    /// Members that another node removed recently (within the last 30 s), with the reason it
    /// gave, and members of nodes that stopped their heartbeat (`nodeLost`). It only says *why*
    /// a member of an earlier view is gone: a key absent from both means `nodeLost`.
    var departed: [PresenceRegistry.Key: PresenceLeaveReason] = [:]
}

/// A member as a `presence_members` row stores it: the user `""` for none, the state as JSON
/// text, the time it joined in milliseconds since 1970. Only the statements speak it.
struct PresenceRow: Sendable, Hashable {
    var cart: String
    var user: String
    var member: String
    var state: String
    var since: Int64

    private static let encoder = FanoutJSON.encoder()
    private static let decoder = FanoutJSON.decoder()

    init(cart: String, user: String, member: String, state: String, since: Int64) {
        (self.cart, self.user, self.member, self.state, self.since) = (cart, user, member, state, since)
    }

    init(_ member: PresenceMember, cart: String) {
        self.init(
            cart: cart, user: member.user ?? "", member: member.member,
            state: (try? Self.encoder.encode(member.state)).map { String(decoding: $0, as: UTF8.self) } ?? "{}",
            since: Int64((member.since.timeIntervalSince1970 * 1_000).rounded()))
    }

    /// The row's key columns of a member's place.
    static func key(_ key: PresenceRegistry.Key) -> (cart: String, user: String, member: String) {
        (key.cart, key.id.user ?? "", key.id.member)
    }

    var key: PresenceRegistry.Key {
        PresenceRegistry.Key(cart: cart, PresenceMember.ID(user: user.isEmpty ? nil : user, member: member))
    }

    var presenceMember: PresenceMember {
        PresenceMember(
            user: user.isEmpty ? nil : user, member: member,
            state: (try? Self.decoder.decode(PresenceState.self, from: Data(state.utf8))) ?? [:],
            since: Date(timeIntervalSince1970: Double(since) / 1_000))
    }

    /// Whether PostgreSQL can store the row's texts (it refuses U+0000 in `text`).
    var isStorable: Bool {
        ![cart, user, member, state].contains { $0.utf8.contains(0) }
    }
}

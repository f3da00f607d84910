import CartStorePostgres
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Presence shared by every server of one PostgreSQL database (`PostgresPresence`): this
/// server's changes are written there, and the others' views applied to the hub's registry.
///
/// A `Service` of the server, started after the store's: it runs `PostgresPresence` (the
/// heartbeat, the writes, the reads) and hands each view it reads to the registry, which tells
/// this server's followers what changed.
final class PostgresPresenceSharing: PresenceSharing, Service {
    private let presence: PostgresPresence
    private let registry = NIOLockedValueBox<PresenceRegistry?>(nil)
    private static let encoder = FanoutJSON.encoder()

    init(store: PostgresCartStore, node: String = UUID().uuidString.lowercased()) {
        presence = PostgresPresence(store: store, node: node)
    }

    func attach(_ registry: PresenceRegistry) {
        self.registry.withLockedValue { $0 = registry }
    }

    func set(_ member: PresenceMember, cart: String) {
        let state = (try? Self.encoder.encode(member.state)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        presence.set(
            PresenceRecord(
                cartID: cart, user: member.user ?? "", member: member.member, state: state,
                since: Int64((member.since.timeIntervalSince1970 * 1_000).rounded())))
    }

    func remove(_ id: PresenceMember.ID, cart: String, reason: PresenceLeaveReason) {
        presence.remove(PresenceKey(cartID: cart, user: id.user ?? "", member: id.member), reason: reason.rawValue)
    }

    func run() async throws {
        let presence = self.presence
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await presence.run() }
            group.addTask {
                for await view in presence.views {
                    self.registry.withLockedValue { $0 }?.apply(Self.members(of: view), departed: Self.departures(of: view))
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    private static func members(of view: PresenceView) -> [PresenceRegistry.Key: PresenceMember] {
        var members: [PresenceRegistry.Key: PresenceMember] = [:]
        for record in view.members.values {
            let state = (try? FanoutJSON.decoder().decode(PresenceState.self, from: Data(record.state.utf8))) ?? [:]
            let member = PresenceMember(
                user: record.user.isEmpty ? nil : record.user, member: record.member, state: state,
                since: Date(timeIntervalSince1970: Double(record.since) / 1_000))
            members[PresenceRegistry.Key(cart: record.cartID, member.id)] = member
        }
        return members
    }

    private static func departures(of view: PresenceView) -> [PresenceRegistry.Key: PresenceLeaveReason] {
        var departed: [PresenceRegistry.Key: PresenceLeaveReason] = [:]
        for (key, reason) in view.departed {
            let id = PresenceMember.ID(user: key.user.isEmpty ? nil : key.user, member: key.member)
            departed[PresenceRegistry.Key(cart: key.cartID, id)] = PresenceLeaveReason(rawValue: reason) ?? .closed
        }
        return departed
    }
}

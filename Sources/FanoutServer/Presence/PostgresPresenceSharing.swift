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

    init(store: PostgresCartStore, node: String = UUID().uuidString.lowercased()) {
        presence = PostgresPresence(store: store, node: node)
    }

    func attach(_ registry: PresenceRegistry) {
        self.registry.withLockedValue { $0 = registry }
    }

    func set(_ member: PresenceMember, cart: String) {
        presence.set(member, cart: cart)
    }

    func remove(_ id: PresenceMember.ID, cart: String, reason: PresenceLeaveReason) {
        presence.remove(id, cart: cart, reason: reason)
    }

    func run() async throws {
        let presence = self.presence
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await presence.run() }
            group.addTask {
                for await view in presence.views {
                    self.registry.withLockedValue { $0 }?.apply(view.members, departed: view.departed)
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }
}

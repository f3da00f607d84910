import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CartStorePostgres
@testable import FanoutServer

/// Presence shared by the nodes on one database: each test's nodes are `PostgresCartStore`s on
/// one database, each with its `PostgresPresence`, as servers are.
@Suite("PostgreSQL presence", .tags(.postgres), .outsideTheFastSet, .timeLimit(.minutes(2)), .needsPostgreSQL)
struct PostgresPresenceTests {
    @Test func aMemberSetOnOneNodeAppearsOnTheOtherAndSoDoItsStateChanges() async throws {
        try await withNodes(2) { nodes, _ in
            let (first, second) = (nodes[0], nodes[1])
            await eventually("the first view, as soon as the table is read") { second.view != nil }
            let record = PresenceMember(user: "u", member: "phone", state: ["typing": false], since: .milliseconds(1_000))
            first.presence.set(record, cart: "c")
            await eventually("the member on the other node") { second.view?.members[key(record)] == record }
            #expect(first.view?.members.isEmpty == true, "a node's view holds the others' members, not its own")

            var changed = record
            changed.state = ["typing": true]
            first.presence.set(changed, cart: "c")
            await eventually("the new state on the other node") { second.view?.members[key(record)]?.state == changed.state }
            #expect(second.view?.members.count == 1)
        }
    }

    /// A node LISTENs for its events and for presence on one session: PostgreSQL wakes every
    /// listening session at each NOTIFY, so a session of its own for presence was woken by
    /// every batch of every server. Presence still hears through it.
    @Test func aNodeListensForEventsAndPresenceOnOneSession() async throws {
        try await withNodes(2) { nodes, url in
            let (first, second) = (nodes[0], nodes[1])
            await eventually("both nodes' first views") { first.view != nil && second.view != nil }
            let server = try await SharedPostgres.shared.server()
            let listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            await eventually("each node listening") {
                (try? await server.psql(listening, on: url))?.trimmingCharacters(in: .whitespacesAndNewlines) == "2"
            }
            // Presence heard both ways: each node listens on its presence channel by then.
            let record = PresenceMember(user: "u", member: "m", state: [:], since: .milliseconds(1))
            first.presence.set(record, cart: "c")
            await eventually("the member on the other node") { second.view?.members[key(record)] == record }
            let back = PresenceMember(user: "v", member: "n", state: [:], since: .milliseconds(2))
            second.presence.set(back, cart: "c")
            await eventually("and the other way") { first.view?.members[key(back)] == back }
            let sessions = try await server.psql(listening, on: url).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(sessions == "2", "one LISTEN session per node, for its events and presence both")
        }
    }

    /// A member PostgreSQL cannot store (a NUL in its user, as a token's `sub` once carried)
    /// is not shared: before, it failed every batch it was in, the node stopped heartbeating,
    /// and the other nodes dropped all its members as `node_lost` until a restart.
    @Test func aMemberPostgreSQLCannotStoreNeverFailsTheOthersWrites() async throws {
        try await withNodes(2) { nodes, _ in
            let (first, second) = (nodes[0], nodes[1])
            let before = PresenceMember(user: "u", member: "before", state: [:], since: .milliseconds(1))
            first.presence.set(before, cart: "c")
            await eventually("the first member on the other node") { second.view?.members[key(before)] == before }
            let unstorable = PresenceMember(user: "nul\u{0}user", member: "m", state: [:], since: .milliseconds(2))
            first.presence.set(unstorable, cart: "c")
            let after = PresenceMember(user: "u", member: "after", state: ["typing": true], since: .milliseconds(3))
            first.presence.set(after, cart: "c")
            first.presence.remove(unstorable.id, cart: "c", reason: .closed)
            await eventually("the member set after it on the other node") { second.view?.members[key(after)] == after }
            #expect(second.view?.members[key(before)] == before, "the member set before it is not lost")
            #expect(second.view?.members.count == 2)
            let heartbeat = PresenceMember(user: "u", member: "later", state: [:], since: .milliseconds(4))
            first.presence.set(heartbeat, cart: "c")
            await eventually("and the node writes on") { second.view?.members[key(heartbeat)] == heartbeat }
        }
    }

    @Test func aRemovedMemberLeavesTheOthersViewsWithItsReason() async throws {
        try await withNodes(2) { nodes, _ in
            let (first, second) = (nodes[0], nodes[1])
            let kept = PresenceMember(user: "u", member: "kept", state: [:], since: .milliseconds(1))
            let leaving = PresenceMember(user: nil, member: "leaving", state: [:], since: .milliseconds(2))
            first.presence.set(kept, cart: "c")
            first.presence.set(leaving, cart: "c")
            await eventually("both members on the other node") { second.view?.members.count == 2 }
            first.presence.remove(leaving.id, cart: "c", reason: .closed)
            await eventually("the member gone, with its reason") {
                second.view.map { $0.members[key(leaving)] == nil && $0.departed[key(leaving)] == .closed } ?? false
            }
            #expect(second.view?.members == [key(kept): kept])
        }
    }

    /// A member that moved to another node (a takeover) stays there when the node it left
    /// removes it afterwards: the remove is of the old node's row, which is no longer its.
    @Test func aKeyTakenOverStaysWithTheNodeThatTookItWhenTheOldOneRemovesIt() async throws {
        try await withNodes(3) { nodes, _ in
            let (old, new, watcher) = (nodes[0], nodes[1], nodes[2])
            let before = PresenceMember(user: "u", member: "m", state: ["on": "old"], since: .milliseconds(1))
            old.presence.set(before, cart: "c")
            await eventually("the member as the old node holds it") { watcher.view?.members[key(before)] == before }
            var after = before
            after.state = ["on": "new"]
            after.since = .milliseconds(2)
            new.presence.set(after, cart: "c")
            await eventually("the member as the new node holds it") { watcher.view?.members[key(before)] == after }
            old.presence.remove(before.id, cart: "c", reason: .closed)
            // Written with the remove or after it: once the watcher sees it, the remove is done.
            let marker = PresenceMember(user: "u", member: "marker", state: [:], since: .milliseconds(3))
            old.presence.set(marker, cart: "c")
            await eventually("the old node's later write") { watcher.view?.members[key(marker)] != nil }
            #expect(watcher.view?.members[key(before)] == after, "the new node's member, untouched")
            #expect(watcher.view?.departed[key(before)] == nil)
            #expect(old.view?.members[key(before)] == after, "the old node sees it at the new one")
        }
    }

    /// A node that stops heartbeating without removing anything (as a dead server does) is gone
    /// for the others within `nodeTimeout` and a poll, its members with reason `node_lost`.
    @Test func aSilentNodesMembersAreGoneAfterTheTimeoutAsNodeLost() async throws {
        try await withNodes(2) { nodes, url in
            let (dying, living) = (nodes[0], nodes[1])
            let record = PresenceMember(user: "u", member: "m", state: [:], since: .milliseconds(1))
            let own = PresenceMember(user: "u", member: "other", state: [:], since: .milliseconds(1))
            dying.presence.set(record, cart: "c")
            living.presence.set(own, cart: "c")
            await eventually("the member on the other node") { living.view?.members[key(record)] == record }
            await eventually("the other node's member on the dying one") { dying.view?.members[key(own)] == own }
            dying.stopHeartbeat()
            await eventually(timeout: PostgresPresence.nodeTimeout + .seconds(15), "the member gone") {
                living.view?.members[key(record)] == nil
            }
            // The reason says it was the timeout (a lower bound on the time is no test on a
            // busy machine: the dying node's last heartbeat may itself have come late).
            #expect(living.view?.departed[key(record)] == .nodeLost)
            // After the sweep the reason is kept (the row marked left), and the living node's own
            // member stays.
            let server = try await SharedPostgres.shared.server()
            await eventually("the dead node swept") {
                (try? await server.psql("SELECT count(*) FROM presence_nodes", on: url))?.trimmingCharacters(in: .whitespacesAndNewlines)
                    == "1"
            }
            let reason = try await server.psql("SELECT left_reason FROM presence_members WHERE member = 'm'", on: url)
            #expect(reason.trimmingCharacters(in: .whitespacesAndNewlines) == "node_lost")
            #expect(living.view?.departed[key(record)] == .nodeLost)
        }
    }

    /// The others swept a node's rows while it was cut off (as they do to a node silent past
    /// the timeout): at its next heartbeat it finds its row gone and writes all it holds again.
    @Test func aNodeSweptWhileCutOffWritesEverythingAgain() async throws {
        try await withNodes(2) { nodes, url in
            let (first, second) = (nodes[0], nodes[1])
            let record = PresenceMember(user: "u", member: "m", state: [:], since: .milliseconds(1))
            first.presence.set(record, cart: "c")
            await eventually("the member on the other node") { second.view?.members[key(record)] == record }
            let server = try await SharedPostgres.shared.server()
            _ = try await server.psql(
                "BEGIN",
                "DELETE FROM presence_nodes WHERE node = '\(first.name)'",
                "UPDATE presence_members SET left_reason = 'node_lost', changed_at = now() WHERE node = '\(first.name)'",
                "COMMIT",
                on: url)
            await eventually("the member written again") {
                (try? await server.psql("SELECT left_reason IS NULL FROM presence_members WHERE member = 'm'", on: url))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) == "t"
            }
            await eventually("the member on the other node again") { second.view?.members[key(record)] == record }
        }
    }

    /// PostgreSQL crashes and restarts (the presence tables are UNLOGGED: emptied by the
    /// recovery): each node writes again everything it holds, what changed meanwhile included.
    @Test(.needsPostgreSQLPrograms) func afterTheDatabaseRestartsEveryNodeWritesItsPresenceAgain() async throws {
        let postgres = try await PostgresServer.start()
        guard postgres.directory != nil else { return }  // FANOUT_POSTGRES_URL's server is not ours to stop
        try await withNodes(2, on: try await postgres.makeDatabase(named: "presence_restart")) { nodes, _ in
            let (first, second) = (nodes[0], nodes[1])
            let before = PresenceMember(user: "u", member: "before", state: [:], since: .milliseconds(1))
            first.presence.set(before, cart: "c")
            await eventually("the member on the other node") { second.view?.members[key(before)] == before }

            try await postgres.pause(immediately: true)
            let during = PresenceMember(user: "u", member: "during", state: [:], since: .milliseconds(2))
            first.presence.set(during, cart: "c")
            try await postgres.resume()
            await eventually("both members on the other node") {
                second.view?.members == [key(before): before, key(during): during]
            }
        }
        await postgres.stop()
    }
}

/// `count` nodes on `url`, or on a new database of the shared cluster, stopped when `body`
/// returns or throws.
private func withNodes(
    _ count: Int, on url: String? = nil, _ body: ([PresenceNode], String) async throws -> Void
) async throws {
    let url = if let url { url } else { try await SharedPostgres.shared.newDatabase() }
    var nodes: [PresenceNode] = []
    defer { for node in nodes { node.stop() } }
    for _ in 0..<count { nodes.append(try await PresenceNode.start(url: url)) }
    try await body(nodes, url)
}

/// A node of the tests: a store on the database with its service running, its presence
/// running, and the newest view it told.
final class PresenceNode: Sendable {
    let name: String
    let postgres: PostgresCartStore
    let presence: PostgresPresence
    private let latest = NIOLockedValueBox<PresenceView?>(nil)
    private let tasks: [Task<Void, Never>]

    private init(name: String, postgres: PostgresCartStore) {
        self.name = name
        self.postgres = postgres
        let presence = PostgresPresence(store: postgres, node: name)
        self.presence = presence
        let latest = self.latest
        tasks = [
            Task { try? await presence.run() },
            Task { for await view in presence.views { latest.withLockedValue { $0 = view } } },
            Task { try? await postgres.run() },
        ]
    }

    static func start(url: String) async throws -> PresenceNode {
        PresenceNode(name: UUID().uuidString, postgres: try await PostgresCartStore(url: url, deadline: PostgresCartStore.testDeadline))
    }

    /// The newest view; nil before the first.
    var view: PresenceView? { latest.withLockedValue { $0 } }

    /// Ends the presence's `run()` (no more heartbeats, nothing removed), as a node that died;
    /// the store runs on.
    func stopHeartbeat() {
        tasks[0].cancel()
    }

    /// Ends everything.
    func stop() {
        for task in tasks { task.cancel() }
        try? postgres.store.close()
    }
}

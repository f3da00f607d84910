import FanoutProtocol
import FanoutTestSupport
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Presence with three real `fanout-server` processes on one PostgreSQL database: every server
/// answers for every server's members, and a server that dies takes its members with it.
@Suite(
    "Presence across servers", .tags(.processes, .postgres), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)),
    .needsPostgreSQL)
struct PresenceNodesTests {
    /// The time docs/PROTOCOL.md promises for a dead server's members to leave the others.
    static let nodeLostWithin: Duration = .seconds(7)

    @Test func presenceAgreesOnEveryServerAndAKilledServersMembersLeaveEverywhere() async throws {
        let postgres = try await PostgresServer.start()
        let database = try await postgres.makeDatabase(named: "presence")
        // The watchers' leases are not this test's subject (a node's members leave by the node's
        // own lease in the database): long enough that a loaded machine never ends a watcher.
        let nodes = try await ServerProcess.start(
            3, arguments: ["--port", "0", "--db", database, "--heartbeat-interval", "0.2", "--lease-ttl", "30"])
        let ports = nodes.map(\.port)
        let watchers = ports.enumerated().map { node, port in PresenceClient(port: port, cart: "shared", key: "w\(node)") }
        let everyone: Set<String> = ["w0", "w1", "w2"]
        for (node, watcher) in watchers.enumerated() {
            await eventually("server \(node)'s watcher to see all three") {
                watcher.members.keys.map(\.member).sorted() == everyone.sorted()
            }
        }
        for port in ports {
            let members = try await Self.presence(port: port, cart: "shared")
            #expect(Set(members) == everyone, "GET on :\(port) answers for every server's members")
        }

        try await watchers[1].send(.presence(state: ["editing": true]))
        for node in [0, 2] {
            await eventually("server \(node)'s watcher to see w1's state") {
                watchers[node].members[.init(user: nil, member: "w1")]?.state == ["editing": true]
            }
        }

        await watchers[2].close()
        for node in [0, 1] {
            await eventually("server \(node)'s watcher to see w2 leave") { watchers[node].members[.init(user: nil, member: "w2")] == nil }
            #expect(watchers[node].leaves.last == .init(id: .init(user: nil, member: "w2"), reason: .closed))
        }

        // A member of the third server, which then dies without a word.
        let doomed = PresenceClient(port: ports[2], cart: "shared", key: "doomed")
        for node in [0, 1] {
            await eventually("server \(node)'s watcher to see the doomed member") {
                watchers[node].members[.init(user: nil, member: "doomed")] != nil
            }
        }
        let killedAt = ContinuousClock.now
        nodes[2].signal(SIGKILL)
        _ = await nodes[2].waitForExit()
        for node in [0, 1] {
            await eventually("server \(node)'s watcher to see the doomed member leave") {
                watchers[node].members[.init(user: nil, member: "doomed")] == nil
            }
            #expect(watchers[node].leaves.last == .init(id: .init(user: nil, member: "doomed"), reason: .nodeLost))
        }
        let gone = ContinuousClock.now - killedAt
        print("a killed server's member left the others \(gone.formatted(.units(allowed: [.milliseconds]))) after the kill")
        #expect(
            gone < Self.nodeLostWithin + .seconds(5), "within the documented \(Self.nodeLostWithin) (and a margin for a loaded machine)")
        #expect(Set(try await Self.presence(port: ports[0], cart: "shared")) == ["w0", "w1"])

        await doomed.close()

        // A server that shuts down: its members leave the others as shutting down, not lost.
        let leaving = PresenceClient(port: ports[1], cart: "shared", key: "leaving")
        await eventually("server 0's watcher to see the leaving member") {
            watchers[0].members[.init(user: nil, member: "leaving")] != nil
        }
        nodes[1].signal(SIGTERM)
        #expect(await nodes[1].waitForExit() == 0, "SIGTERM ends a server cleanly")
        await eventually("server 0's watcher to see server 1's members leave") {
            watchers[0].members[.init(user: nil, member: "leaving")] == nil && watchers[0].members[.init(user: nil, member: "w1")] == nil
        }
        #expect(watchers[0].leaves.suffix(2).map(\.reason) == [.shuttingDown, .shuttingDown], "\(watchers[0].leaves.suffix(2))")

        await leaving.close()
        for watcher in watchers.prefix(2) { await watcher.close() }
        nodes[0].signal(SIGTERM)
        _ = await nodes[0].waitForExit()
        await postgres.stop()
    }

    /// The member keys `GET /carts/{cart}/presence` lists.
    static func presence(port: Int, cart: String) async throws -> [String] {
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/carts/\(cart)/presence")!)
        return try FanoutJSON.decoder().decode(PresenceResponse.self, from: data).members.map(\.member)
    }
}

/// A WebSocket subscriber present on one cart under a key, heartbeating, keeping the cart's
/// presence as its messages say.
final class PresenceClient: Sendable {
    struct Leave: Equatable {
        let id: PresenceMember.ID
        let reason: PresenceLeaveReason
    }

    private struct Held {
        var members: [PresenceMember.ID: PresenceMember] = [:]
        var leaves: [Leave] = []
    }

    private let held = NIOLockedValueBox(Held())
    private let writer = NIOLockedValueBox<WebSocketOutboundWriter?>(nil)
    private let connection: Task<Void, any Error>

    init(port: Int, cart: String, key: String) {
        let held = self.held
        let writer = self.writer
        connection = Task {
            var logger = Logger(label: "presence-client")
            logger.logLevel = .critical
            _ = try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/subscribe", logger: logger) { inbound, outbound, _ in
                writer.withLockedValue { $0 = outbound }
                try await outbound.write(
                    .text(try ClientMessage.subscribe(carts: [cart], since: nil, presence: PresenceRequest(key: key)).jsonText()))
                let heartbeats = Task {
                    while !Task.isCancelled {
                        try await Task.sleep(for: .milliseconds(200))
                        try await outbound.write(.text(#"{"type":"heartbeat"}"#))
                    }
                }
                defer { heartbeats.cancel() }
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message,
                        let decoded = try? FanoutJSON.decoder().decode(ServerMessage.self, from: Data(text.utf8))
                    else { continue }
                    held.withLockedValue { held in
                        switch decoded {
                        case .presence(_, let members): held.members = Dictionary(uniqueKeysWithValues: members.map { ($0.id, $0) })
                        case .presenceJoin(_, let member), .presenceUpdate(_, let member): held.members[member.id] = member
                        case .presenceLeave(_, let id, let reason):
                            held.members[id] = nil
                            held.leaves.append(Leave(id: id, reason: reason))
                        default: break
                        }
                    }
                }
            }
        }
    }

    var members: [PresenceMember.ID: PresenceMember] { held.withLockedValue { $0.members } }
    var leaves: [Leave] { held.withLockedValue { $0.leaves } }

    func send(_ message: ClientMessage) async throws {
        await eventually("the connection") { writer.withLockedValue { $0 != nil } }
        try await writer.withLockedValue { $0 }?.write(.text(try message.jsonText()))
    }

    func close() async {
        if let outbound = writer.withLockedValue({ $0 }) { try? await outbound.close(.normalClosure, reason: nil) }
        connection.cancel()
        _ = try? await connection.value
    }
}

import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Synchronization
import Testing

/// Several real `fanout-server` processes on one PostgreSQL database, with real clients.
@Suite(
    "Many servers on PostgreSQL", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: PostgresServer.isAvailable || runningInCI, "apt-get install postgresql (or set FANOUT_POSTGRES_URL) enables the PostgreSQL tests"))
struct ManyNodesTests {
    /// Three servers, two clients on each, six writers spread over all three: every client
    /// prints the same gap-free list as the log. One server is killed mid-burst; its clients
    /// resume on another server from their state files and lose nothing, repeat nothing.
    @Test func everyServerDeliversEveryCommitAndAKilledServersClientsResumeOnAnother() async throws {
        let postgres = try await PostgresServer.start()
        let database = try await postgres.makeDatabase(named: "nodes")
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-nodes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let nodes = try (0..<3).map { _ in try ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases) }
        let ports = nodes.map(\.port)
        let stateFile = { (node: Int, client: Int) in directory.appending(path: "client-\(node)-\(client).seq").path }
        var clients = try (0..<3).map { node in
            try (0..<2).map { client in try SubscribeProcess(port: ports[node], arguments: ["--state-file", stateFile(node, client)]) }
        }
        await eventually("every client's snapshot") { clients.joined().allSatisfy { $0.output.first?.type == "snapshot" } }

        // Writers take the live servers in turn.
        let alive = NIOLockedValueBox(ports)
        let turn = Atomic<Int>(0)
        let burst = Task {
            await Mutations.burst(port: {
                let live = alive.withLockedValue { $0 }
                return live[turn.add(1, ordering: .relaxed).newValue % live.count]
            }, writers: 6, each: 50, tag: "n")
        }
        await eventually("part of the burst on the first server's clients") { (clients[0].first?.eventSeqs.count ?? 0) >= 40 }
        alive.withLockedValue { $0.removeFirst() }
        nodes[0].signal(SIGKILL)
        _ = await nodes[0].waitForExit()

        // The first server's clients stop (saving the last seq they printed) and start again
        // on the second server.
        var before: [[Int64]] = []
        for client in clients[0] {
            client.signal(SIGTERM)
            client.process.waitUntilExit()
            before.append(client.eventSeqs)
        }
        clients[0] = try (0..<2).map { client in try SubscribeProcess(port: ports[1], arguments: ["--state-file", stateFile(0, client)]) }

        let acknowledged = await burst.value
        #expect(acknowledged.count >= 250, "writers carried on on the two live servers (\(acknowledged.count) of 300)")
        let log = try await Mutations.log(port: ports[2])
        #expect(log == Array(1...Int64(log.count)), "one gap-free log")
        #expect(Set(acknowledged).isSubset(of: Set(log)), "every 2xx mutation is in the log")
        #expect(try await Mutations.log(port: ports[1]) == log, "both servers read the same log")

        for node in 1...2 {
            for client in clients[node] {
                await eventually("a client of server \(node) to have everything") { client.eventSeqs.count >= log.count }
                #expect(client.eventSeqs == log, "printed exactly once each, in order")
            }
        }
        for (index, client) in clients[0].enumerated() {
            await eventually("a resumed client to have everything") { before[index].count + client.eventSeqs.count >= log.count }
            #expect(client.output.first?.type == "event", "resumed from its seq: no snapshot")
            #expect(before[index] + client.eventSeqs == log, "nothing lost, nothing twice across the move")
        }
        for node in nodes.dropFirst() { node.signal(SIGTERM) }
        for node in nodes.dropFirst() { #expect(await node.waitForExit() == 0) }
        await postgres.stop()
    }
}

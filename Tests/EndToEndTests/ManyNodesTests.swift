import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Synchronization
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Several real `fanout-server` processes on one PostgreSQL database, with real clients.
@Suite(
    "Many servers on PostgreSQL", .serialized, .timeLimit(.minutes(3)),
    .needsPostgreSQL)
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
        alive.withLockedValue { _ = $0.removeFirst() }
        nodes[0].signal(SIGKILL)
        _ = await nodes[0].waitForExit()

        // The first server's clients stop (saving the last seq they printed) and start again
        // on the second server.
        var before: [[Int64]] = []
        for client in clients[0] {
            client.signal(SIGTERM)
            #expect(await client.waitForExit(), "SIGTERM ends the client")
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

/// A server whose PostgreSQL goes away and comes back.
@Suite(
    "PostgreSQL going away", .serialized, .timeLimit(.minutes(3)),
    .needsPostgreSQLPrograms)
struct PostgresOutageTests {
    /// While the database is down, changes are refused with 503 `store_unavailable` and
    /// `/healthz` says 503, but subscribers stay connected; once it is back, changes go through
    /// and every subscriber gets every event, gap-free.
    @Test func changesAreRefusedWhileItIsDownAndDeliveryResumesGapFree() async throws {
        let postgres = try await PostgresServer.startCluster()
        let database = try await postgres.makeDatabase(named: "outage")
        let server = try ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let port = server.port
        let client = try SubscribeProcess(port: port)
        await eventually("the snapshot") { client.output.first?.type == "snapshot" }
        _ = await Mutations.burst(port: { port }, writers: 2, each: 5, tag: "before")
        await eventually("10 events") { client.eventSeqs.count == 10 }

        try await postgres.pause()
        let refused = try await HTTPProbe.status(port: port, "POST", "/carts/down/items", body: #"{"sku":"a","quantity":1,"unitPriceCents":1}"#)
        #expect(refused.status == 503)
        #expect(refused.body.contains("store_unavailable"), "\(refused.body)")
        await eventually(timeout: .seconds(20), "/healthz to say 503") {
            (try? await HTTPProbe.status(port: port, "GET", "/healthz"))?.status == 503
        }
        #expect(client.process.isRunning, "the subscriber stays connected")
        let stats = try await EndToEndTests.stats(port: port)
        #expect(stats["subscribers"] as? Int == 1)

        try await postgres.resume()
        await eventually(timeout: .seconds(60), "changes to go through again") {
            await Mutations.add(port: port, cart: "after", sku: "first") != nil
        }
        _ = await Mutations.burst(port: { port }, writers: 2, each: 5, tag: "after")
        let log = try await Mutations.log(port: port)
        #expect(log == Array(1...Int64(log.count)), "no gap in the log")
        await eventually("every event") { client.eventSeqs.count >= log.count }
        #expect(client.eventSeqs == log, "printed exactly once each, in order")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        await postgres.stop()
    }
}

/// An HTTP request whose status and body the test looks at.
enum HTTPProbe {
    static func status(port: Int, _ method: String, _ path: String, body: String? = nil) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = 30
        if let body {
            request.httpBody = Data(body.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}

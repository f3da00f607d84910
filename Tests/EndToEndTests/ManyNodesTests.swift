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
    "Many servers on PostgreSQL", .tags(.processes, .postgres), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)),
    .needsPostgreSQL)
struct ManyNodesTests {
    /// Three servers, which say one database identity, two clients on each, six writers spread
    /// over all three: every client prints the same gap-free list as the log. One server is
    /// killed mid-burst; its clients resume on another server from their state files and lose
    /// nothing, repeat nothing. The last server runs on one event-loop thread (`--threads 1`,
    /// as on a machine servers share): its connections, fan-out, batches, statements and
    /// LISTEN session all on one loop, which nothing of it may wait on.
    @Test func everyServerDeliversEveryCommitAndAKilledServersClientsResumeOnAnother() async throws {
        let postgres = try await PostgresServer.start()
        let database = try await postgres.makeDatabase(named: "nodes")
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-nodes-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        var nodes: [ServerProcess] = []
        for node in 0..<3 {
            nodes.append(
                try await ServerProcess(
                    arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases + (node == 2 ? ["--threads", "1"] : [])))
        }
        let ports = nodes.map(\.port)
        // One database, one identity, whichever server says it.
        var identities = Set<String?>()
        for port in ports {
            identities.insert(try await DatabaseIdentityEndToEndTests.get("/carts", port: port)["databaseId"] as? String)
            identities.insert(try await DatabaseIdentityEndToEndTests.webSocketWelcome(port: port)["databaseId"] as? String)
        }
        #expect(identities.count == 1 && isDatabaseIdentity(identities.first ?? nil), "\(identities)")
        let stateFile = { (node: Int, client: Int) in directory.appending(path: "client-\(node)-\(client).seq").path }
        var clients: [[SubscribeProcess]] = []
        for node in 0..<3 {
            var ofNode: [SubscribeProcess] = []
            for client in 0..<2 {
                ofNode.append(try await SubscribeProcess(port: ports[node], arguments: ["--state-file", stateFile(node, client)]))
            }
            clients.append(ofNode)
        }
        await eventually("every client's snapshot") { clients.joined().allSatisfy { $0.output.first?.type == "snapshot" } }

        // Writers take the live servers in turn.
        let alive = NIOLockedValueBox(ports)
        let turn = Atomic<Int>(0)
        let burst = Task {
            await Mutations.burst(
                port: {
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
        clients[0] = []
        for client in 0..<2 {
            clients[0].append(try await SubscribeProcess(port: ports[1], arguments: ["--state-file", stateFile(0, client)]))
        }

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
        for node in nodes.dropFirst() {
            let status = await node.waitForExit()
            #expect(status == 0, "SIGTERM ends a server cleanly (exit status \(status); -1: still running after 30 s)")
        }
        await postgres.stop()
    }
}

/// A server whose PostgreSQL goes away and comes back.
@Suite(
    "PostgreSQL going away", .tags(.processes, .postgres), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)),
    .needsPostgreSQLPrograms)
struct PostgresOutageTests {
    /// While the database is down, changes are refused with 503 `store_unavailable` and
    /// `/healthz` says 503, but subscribers stay connected; once it is back, changes go through
    /// and every subscriber gets every event, gap-free.
    @Test func changesAreRefusedWhileItIsDownAndDeliveryResumesGapFree() async throws {
        let postgres = try await PostgresServer.startCluster()
        let database = try await postgres.makeDatabase(named: "outage")
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let port = server.port
        let client = try await SubscribeProcess(port: port)
        await eventually("the snapshot") { client.output.first?.type == "snapshot" }
        _ = await Mutations.burst(port: { port }, writers: 2, each: 5, tag: "before")
        await eventually("10 events") { client.eventSeqs.count == 10 }

        try await postgres.pause()
        let refused = try await HTTPProbe.status(
            port: port, "POST", "/carts/down/items", body: #"{"sku":"a","quantity":1,"unitPriceCents":1}"#)
        #expect(refused.status == 503)
        #expect(refused.body.contains("store_unavailable"), "\(refused.body)")
        await eventually(timeout: .seconds(20), "/healthz to say 503") {
            (try? await HTTPProbe.status(port: port, "GET", "/healthz"))?.status == 503
        }
        #expect(client.process.isRunning, "the subscriber stays connected")
        // The log says so once, with what failed.
        #expect(await eventually("the log to say the database is lost") { server.standardError.contains("database lost") })
        let stats = try await EndToEndTests.stats(port: port)
        #expect(stats["subscribers"] as? Int == 1)

        try await postgres.resume()
        await eventually(timeout: .seconds(60), "changes to go through again") {
            await Mutations.add(port: port, cart: "after", sku: "first") != nil
        }
        _ = await Mutations.burst(port: { port }, writers: 2, each: 5, tag: "after")
        // …and when it is back, with the time it was away.
        #expect(await eventually("the log to say the database is back") { server.standardError.contains("database back") })
        #expect(server.standardError.contains("fanout.away_s="), "\(server.standardError.suffix(2_000))")
        #expect(server.standardError.components(separatedBy: "database lost").count == 2, "said once")
        let log = try await Mutations.log(port: port)
        #expect(log == Array(1...Int64(log.count)), "no gap in the log")
        await eventually("every event") { client.eventSeqs.count >= log.count }
        #expect(client.eventSeqs == log, "printed exactly once each, in order")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        await postgres.stop()
    }
}

/// A server whose PostgreSQL fails under writers, as it does in production: sessions ended,
/// the database stopped at once and restarted, frozen. Every change is answered, 2xx or 503
/// `store_unavailable`, within the README's bound (`TimedWriters.bound`, with room for a loaded
/// machine), and the server writes again once the database is back.
@Suite(
    "PostgreSQL failing under writers", .tags(.processes, .postgres), .outsideTheFastSet, .serialized, .timeLimit(.minutes(4)),
    .needsPostgreSQLPrograms)
struct PostgresFailureTests {
    /// The server's sessions ended again and again while two writers write: by
    /// `pg_terminate_backend`, and every fourth time by SIGKILL of one of them (PostgreSQL then
    /// ends every session and recovers).
    @Test func killedSessionsLeaveNoChangeUnansweredAndTheServerWritesAgain() async throws {
        let (postgres, server, writers) = try await Self.serverUnderWriters(database: "killed")
        let port = server.port
        let sessions = "FROM pg_stat_activity WHERE application_name = 'fanout'"
        for round in 1...16 {
            try await Task.sleep(for: .milliseconds(500))
            if round % 4 == 0 {
                if let pid = (try? await postgres.psql("SELECT pid \(sessions) LIMIT 1"))
                    .flatMap({ pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
                {
                    kill(pid, SIGKILL)
                }
                await eventually(timeout: .seconds(30), "PostgreSQL back from its recovery") {
                    (try? await postgres.psql("SELECT 1")) != nil
                }
            } else {
                _ = try await postgres.psql("SELECT pg_terminate_backend(pid) \(sessions)")
            }
            #expect(writers.longestWaitInFlight < TimedWriters.bound, "a change waits without an answer")
        }
        try await expectAnsweredAndWritingAgain(writers, port: port)
        await Self.endCleanly(server, postgres)
    }

    /// The database stopped at once (`pg_ctl stop -m immediate`, as in a crash) and started
    /// again, three times, while two writers write.
    @Test func aDatabaseStoppedAndRestartedLeavesNoChangeUnanswered() async throws {
        let (postgres, server, writers) = try await Self.serverUnderWriters(database: "restarted")
        let port = server.port
        for cycle in 1...3 {
            try await postgres.pause(immediately: true)
            await eventually(timeout: TimedWriters.bound, "/healthz to say 503") {
                (try? await HTTPProbe.status(port: port, "GET", "/healthz"))?.status == 503
            }
            let refused = writers.outcome.unavailable
            await eventually(timeout: TimedWriters.bound, "a change refused") { writers.outcome.unavailable > refused }
            #expect(writers.longestWaitInFlight < TimedWriters.bound, "a change waits without an answer")
            try await postgres.resume()
            let restarted = ContinuousClock.now
            let made = writers.outcome.acknowledged.count
            await eventually(timeout: .seconds(60), "changes going through again (cycle \(cycle))") {
                writers.outcome.acknowledged.count > made
            }
            print("cycle \(cycle): changes went through again \(restarted.duration(to: .now)) after the restart")
        }
        try await expectAnsweredAndWritingAgain(writers, port: port)
        await Self.endCleanly(server, postgres)
    }

    /// Every PostgreSQL process stopped (SIGSTOP): connections are accepted, nothing is
    /// answered, as behind a network partition. Changes get 503 within the bound, `/stats` and
    /// `/healthz` answer within it (the latter 503); once the database continues the server
    /// writes again; and SIGTERM in the middle of such a freeze ends the server cleanly.
    @Test func aFrozenDatabaseGets503sWithinTheBoundAndSIGTERMStillEndsTheServer() async throws {
        let (postgres, server, writers) = try await Self.serverUnderWriters(database: "frozen")
        let port = server.port
        try postgres.freeze(true)
        do {
            let frozenAt = ContinuousClock.now
            let refused = writers.outcome.unavailable
            await eventually(timeout: TimedWriters.bound, "a change refused") { writers.outcome.unavailable > refused }
            await eventually(timeout: TimedWriters.bound, "/healthz to say 503") {
                (try? await HTTPProbe.status(port: port, "GET", "/healthz"))?.status == 503
            }
            let asked = ContinuousClock.now
            let stats = try? await HTTPProbe.status(port: port, "GET", "/stats")
            #expect(stats?.status == 200 && asked.duration(to: .now) < TimedWriters.bound, "/stats answers while the database is frozen")
            while frozenAt.duration(to: .now) < .seconds(12) {
                #expect(writers.longestWaitInFlight < TimedWriters.bound, "a change waits without an answer")
                try await Task.sleep(for: .milliseconds(500))
            }
        } catch {
            try? postgres.freeze(false)
            throw error
        }
        try postgres.freeze(false)
        try await expectAnsweredAndWritingAgain(writers, port: port)

        // Frozen again, a change under way: SIGTERM still ends the server, and cleanly.
        try postgres.freeze(true)
        let underWay = Task { await HTTPProbe.change(port: port, cart: "last", sku: "a") }
        // Paced, not waited for: the server shows no sign of a change sent to a frozen
        // database (it has left the writer's queue), and the exit below is asserted either way.
        try await Task.sleep(for: .milliseconds(500))
        server.signal(SIGTERM)
        // The change under way has its bound to be answered, then the server stops; on a loaded
        // machine (the release pass runs its tests side by side) that took over twice the bound.
        let status = await server.waitForExit(timeout: TimedWriters.bound * 4)
        try postgres.freeze(false)
        #expect(status == 0, "SIGTERM ends the server while the database is frozen (exit status \(status); -1: still running)")
        _ = await underWay.value
        await postgres.stop()
    }

    /// A cluster of the test's own, a server on its database `database`, and two writers
    /// whose changes go through. The database's commits are in the log before they are
    /// acknowledged (the harness's clusters have `synchronous_commit` on too; said here again
    /// as this test depends on it): a crash (SIGKILL of a session, an immediate stop) must not
    /// lose what was acknowledged.
    private static func serverUnderWriters(database name: String) async throws -> (PostgresServer, ServerProcess, TimedWriters) {
        let postgres = try await PostgresServer.startCluster()
        let database = try await postgres.makeDatabase(named: name)
        _ = try await postgres.psql("ALTER DATABASE \(name) SET synchronous_commit = on")
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let port = server.port
        // A new cart every 500 changes: a fast server would otherwise fill a cart to its
        // 1 000 lines within the test and answer 409 `too_many_items`.
        let writers = TimedWriters(count: 2) { writer, index in
            await HTTPProbe.change(port: port, cart: "w\(writer)-\(index / 500)", sku: "s\(index)")
        }
        await eventually(timeout: .seconds(30), "changes going through") { writers.outcome.acknowledged.count >= 10 }
        return (postgres, server, writers)
    }

    /// SIGTERM ends the server with status 0; the cluster goes.
    private static func endCleanly(_ server: ServerProcess, _ postgres: PostgresServer) async {
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        await postgres.stop()
    }

    /// Stops the writers: every change was answered within the bound, 2xx or 503, and none
    /// twice; changes go through again; what was acknowledged is in the gap-free log.
    private func expectAnsweredAndWritingAgain(_ writers: TimedWriters, port: Int) async throws {
        let outcome = await writers.stop()
        print("writers: \(outcome)")
        #expect(outcome.unanswered == 0, "every change answered (\(outcome))")
        #expect(outcome.longest < TimedWriters.bound, "answered within the bound (\(outcome))")
        #expect(outcome.otherAnswers.isEmpty, "2xx or 503 store_unavailable only: \(outcome.otherAnswers.prefix(3))")
        await eventually(timeout: .seconds(60), "changes to go through again") {
            await Mutations.add(port: port, cart: "after", sku: "a") != nil
        }
        // The health check follows: on a loaded machine the pool may still be making the
        // connections it lost, and a probe that waits 4 s for one says 503 meanwhile.
        let health = NIOLockedValueBox<(status: Int, body: String)?>(nil)
        let healthy = await eventually(timeout: .seconds(20), "the health check to say ok once changes go through") {
            let answer = try? await HTTPProbe.status(port: port, "GET", "/healthz")
            health.withLockedValue { $0 = answer }
            return answer?.status == 200
        }
        if !healthy { Issue.record("the last health answer: \(health.withLockedValue { $0 }.map { "\($0)" } ?? "none")") }
        let log = try await Mutations.log(port: port)
        #expect(log == Array(1...Int64(log.count)), "one gap-free log")
        #expect(Set(outcome.acknowledged).isSubset(of: Set(log)), "every acknowledged change is in the log")
        #expect(outcome.acknowledged.count == Set(outcome.acknowledged).count, "no seq acknowledged twice")
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

    /// Adds a line, waiting for the answer as long as it takes (60 s): the test times it.
    static func change(port: Int, cart: String, sku: String) async -> TimedWriters.Answer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/carts/\(cart)/items")!)
        request.httpMethod = "POST"
        request.timeoutInterval = 60
        request.httpBody = Data(#"{"sku":"\#(sku)","quantity":1,"unitPriceCents":10}"#.utf8)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        do {
            let (data, response) = try await URLSession.shared.data(for: request)
            let status = (response as? HTTPURLResponse)?.statusCode ?? 0
            let body = String(decoding: data, as: UTF8.self)
            if (200..<300).contains(status),
                let seq = ((try? JSONSerialization.jsonObject(with: data)) as? [String: Any])?["seq"] as? NSNumber
            {
                return .made(seq: seq.int64Value)
            }
            if status == 503, body.contains("store_unavailable") { return .unavailable }
            return .other("\(status) \(body.prefix(200))")
        } catch {
            return .other("\(error)")
        }
    }
}

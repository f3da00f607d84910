import CartStore
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The real `fanout-server` and `fanout-client` executables, as processes, on loopback.
@Suite("End to end", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct EndToEndTests {
    static func temporaryDatabase() throws -> (path: String, cleanup: () -> Void) {
        let (path, cleanup) = try Mutations.temporaryDatabase()
        return (path, cleanup)
    }

    /// A temporary database already holding `carts` carts, `w0`…, each with one line `s0`
    /// (seqs 1…`carts`), closed for a server to open.
    static func temporaryDatabase(carts: Int) async throws -> (path: String, cleanup: () -> Void) {
        let (path, cleanup) = try temporaryDatabase()
        let store = try CartStore(path: path)
        try await writeConcurrently(to: store, writers: carts, perWriter: 1)
        try store.close()
        return (path, cleanup)
    }

    static let fastLeases = ["--heartbeat-interval", "0.2", "--lease-ttl", "1"]

    /// Each client's transport: `subscribe --transport websocket|sse`.
    static let transports = ["websocket", "sse"]

    @Test(arguments: transports)
    func manyClientsPrintTheSameSequenceAsTheLog(transport: String) async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let port = server.port
        let clients = try await SubscribeProcess.start(5, port: port, arguments: ["--transport", transport])
        await eventually("every client's snapshot") { clients.allSatisfy { $0.output.first?.type == "snapshot" } }
        let acknowledged = await Mutations.burst(port: { port }, writers: 4, each: 25, tag: "w")
        #expect(acknowledged.count == 100)
        let log = try await Mutations.log(port: port)
        #expect(log == Array(1...100))
        for client in clients {
            await eventually("all 100 events") { client.eventSeqs.count >= 100 }
            #expect(client.eventSeqs == log)
        }
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    @Test(arguments: transports)
    func clientsResumeAcrossAServerKilledMidBurst(transport: String) async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let first = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let port = first.port
        let clients = try await SubscribeProcess.start(5, port: port, arguments: ["--transport", transport])
        await eventually("every client's snapshot") { clients.allSatisfy { $0.output.first?.type == "snapshot" } }

        let restarted = NIOLockedValueBox<ServerProcess?>(nil)
        // Long enough that the kill below lands inside it however fast the machine writes.
        let burst = Task { await Mutations.burst(port: { port }, writers: 3, each: 400, tag: "k") }
        // Kill the server once some of the burst has landed, then start it again on the same
        // database and port while the writers keep trying.
        await eventually("part of the burst") { (clients.first?.eventSeqs.count ?? 0) >= 30 }
        first.signal(SIGKILL)
        _ = await first.waitForExit()
        let next = try? await ServerProcess(arguments: ["--port", "\(port)", "--db", database] + Self.fastLeases)
        restarted.withLockedValue { $0 = next }
        #expect(restarted.withLockedValue { $0 } != nil, "the server must restart on the same port")
        let acknowledged = await burst.value
        #expect(acknowledged.count < 1_200, "the kill landed mid-burst: some writes were refused")
        #expect(await Mutations.add(port: port, cart: "after", sku: "restart") != nil)

        let log = try await Mutations.log(port: port)
        #expect(log == Array(1...Int64(log.count)), "the log has no gap")
        #expect(Set(acknowledged).isSubset(of: Set(log)), "every 2xx mutation is in the log")
        for client in clients {
            await eventually("the client to catch up") { client.eventSeqs.count >= log.count }
            #expect(client.eventSeqs == log, "printed exactly once each, in order")
        }
        restarted.withLockedValue { $0 }?.signal(SIGTERM)
    }

    @Test func aStoppedClientExpiresThenResumesWhereItLeftOff() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let port = server.port
        let steady = try await SubscribeProcess(port: port)
        let sleeper = try await SubscribeProcess(port: port)
        await eventually("snapshots") { steady.output.first?.type == "snapshot" && sleeper.output.first?.type == "snapshot" }
        _ = await Mutations.burst(port: { port }, writers: 1, each: 5, tag: "a")
        await eventually("5 events each") { sleeper.eventSeqs.count == 5 && steady.eventSeqs.count == 5 }

        sleeper.signal(SIGSTOP)
        await eventually(timeout: .seconds(15), "the server to expire it") {
            let stats = try? await Self.stats(port: port)
            return (stats?["expiries"] as? Int ?? 0) >= 1
        }
        _ = await Mutations.burst(port: { port }, writers: 2, each: 10, tag: "b")
        await eventually("the steady client keeps up") { steady.eventSeqs.count == 25 }
        sleeper.signal(SIGCONT)
        await eventually("the sleeper to resume") { sleeper.eventSeqs.count >= 25 }
        #expect(sleeper.eventSeqs == steady.eventSeqs)
        #expect(sleeper.eventSeqs == Array(1...25))
        server.signal(SIGTERM)
    }

    @Test func sinceInTheMiddlePrintsExactlyTheTail() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let port = server.port
        _ = await Mutations.burst(port: { port }, writers: 1, each: 20, tag: "t")
        let tail = try await SubscribeProcess(port: port, arguments: ["--since", "12"])
        await eventually("the tail") { tail.eventSeqs.count >= 8 }
        #expect(tail.output.allSatisfy { $0.type == "event" }, "no snapshot when resuming")
        #expect(tail.eventSeqs == Array(13...20))
        server.signal(SIGTERM)
    }

    @Test func aRestartedClientResumesFromItsStateFile() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let stateFile = database + ".seq"
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let port = server.port
        let first = try await SubscribeProcess(port: port, arguments: ["--state-file", stateFile])
        await eventually("snapshot") { first.output.first?.type == "snapshot" }
        _ = await Mutations.burst(port: { port }, writers: 1, each: 4, tag: "s")
        await eventually("4 events") { first.eventSeqs.count == 4 }
        first.signal(SIGTERM)
        let status = await first.exitCode()
        #expect(status == 0, "SIGTERM ends the client with 0 (\(status.map { "\($0)" } ?? "still running after 30 s"))")
        _ = await Mutations.burst(port: { port }, writers: 1, each: 3, tag: "t")
        let second = try await SubscribeProcess(port: port, arguments: ["--state-file", stateFile])
        await eventually("the 3 new events") { second.eventSeqs.count >= 3 }
        #expect(second.output.map(\.type) == ["event", "event", "event"], "no snapshot, nothing repeated")
        #expect(second.eventSeqs == [5, 6, 7])
        // The client saves a seq just after printing its line: the file catches up a moment later.
        let saved = { (try? String(contentsOfFile: stateFile, encoding: .utf8))?.split(separator: " ") ?? [] }
        await eventually("the state file at seq 7") { saved().first == "7" }
        #expect(isDatabaseIdentity(saved().last.map { $0.trimmingCharacters(in: .newlines) }), "the seq and its database: \(saved())")
        server.signal(SIGTERM)
    }

    /// An outage as a person reads it: one line when it begins ("cannot reach HOST:PORT
    /// (connection refused …)"), not SwiftNIO's account of each attempt (a 200-character line
    /// per retry, 83 lines in 3 minutes), and one when it ends; a name that does not resolve is
    /// given up on with exit status 1 (it was retried for ever).
    @Test func aClientSaysAnOutageOnceAndItsEndAndGivesUpOnANameThatDoesNotResolve() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let port = try freeLoopbackPort()
        let client = try await SubscribeProcess(port: port)
        await eventually("the outage said") { client.process.standardError.contains("cannot reach 127.0.0.1:\(port) (connection refused") }
        let server = try await ServerProcess(arguments: ["--port", "\(port)", "--db", database])
        await eventually("its end said") { client.process.standardError.contains("fanout-client: reconnected") }
        await eventually("the snapshot") { client.output.first?.type == "snapshot" }
        let said = client.process.standardError
        #expect(said.components(separatedBy: "cannot reach").count == 2, "once, however many attempts: \(said)")
        #expect(!said.contains("NIOConnectionError") && !said.contains("SingleConnectionFailure"), "\(said)")
        server.signal(SIGTERM)
        _ = await server.waitForExit()

        let unknown = try await runToExit(
            "fanout-client", ["subscribe", "--url", "ws://nosuchhost.invalid:8080/subscribe"], timeout: .seconds(60))
        #expect(!unknown.timedOut && unknown.status == 1, "status \(unknown.status)")
        #expect(unknown.standardError.contains("cannot resolve nosuchhost.invalid"), "\(unknown.standardError)")
        #expect(unknown.standardError.contains("giving up"))
    }

    /// A state file of another database (a new one, with more events than the file's seq):
    /// the client says so and starts over from a snapshot, rather than resuming after a seq
    /// that counts another database's changes (it printed 6, 7 and 8 only, skipping five).
    @Test func aStateFileOfAnotherDatabaseStartsOverFromASnapshot() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let stateFile = database + ".seq"
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + Self.fastLeases)
        let first = try await SubscribeProcess(port: server.port, arguments: ["--state-file", stateFile])
        await eventually("snapshot") { first.output.first?.type == "snapshot" }
        _ = await Mutations.burst(port: { server.port }, writers: 1, each: 5, tag: "old")
        await eventually("5 events") { first.eventSeqs.count == 5 }
        first.signal(SIGTERM)
        _ = await first.exitCode()
        server.signal(SIGTERM)
        _ = await server.waitForExit()

        let (other, cleanupOther) = try Self.temporaryDatabase()
        defer { cleanupOther() }
        let next = try await ServerProcess(arguments: ["--port", "0", "--db", other] + Self.fastLeases)
        _ = await Mutations.burst(port: { next.port }, writers: 1, each: 8, tag: "new")
        let second = try await SubscribeProcess(port: next.port, arguments: ["--state-file", stateFile])
        await eventually("a snapshot of the new database") { second.output.contains { $0.type == "snapshot" } }
        #expect(second.output.first { $0.type == "snapshot" }?.seq == 8, "the whole of the new database")
        #expect(second.eventSeqs.isEmpty, "no event of the new database passed off as following the old seq 5")
        #expect(second.process.standardError.contains("starting over from a snapshot"), "stderr: \(second.process.standardError)")
        _ = await Mutations.burst(port: { next.port }, writers: 1, each: 1, tag: "after")
        await eventually("the event after the snapshot") { second.eventSeqs == [9] }
        next.signal(SIGTERM)
    }

    /// A snapshot too big for one message comes in parts (500 carts each); the real client
    /// prints each, and events follow only the last.
    @Test func aSnapshotOfManyCartsArrivesInPartsThenTheEvents() async throws {
        let (database, cleanup) = try await Self.temporaryDatabase(carts: 1_203)
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        defer { server.signal(SIGTERM) }
        let client = try await SubscribeProcess(port: server.port)
        await eventually("the last part") { client.output.contains { $0.type == "snapshot" && !$0.more } }
        let parts = client.output.filter { $0.type == "snapshot" }
        #expect(parts.map(\.carts) == [500, 500, 203])
        #expect(parts.map(\.more) == [true, true, false])
        #expect(Set(parts.map(\.seq)) == [1_203], "every part is of the same snapshot")
        let seq = try #require(await Mutations.add(port: server.port, cart: "after", sku: "a"))
        await eventually("the event after the snapshot") { client.eventSeqs == [seq] }
        #expect(seq == 1_204)
    }

    @Test func aBadTokenIsReportedOnceWithANonZeroExit() async throws {
        let (database, cleanup) = try Self.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--token", "right"])
        let outcome = try await runToExit(
            "fanout-client", ["subscribe", "--url", "ws://127.0.0.1:\(server.port)/subscribe", "--token", "wrong"])
        #expect(!outcome.timedOut, "the client retried instead of giving up")
        #expect(outcome.status != 0)
        #expect(outcome.standardError.contains("bad_token"), "stderr: \(outcome.standardError)")
        server.signal(SIGTERM)
    }

    static func stats(port: Int) async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stats")!)
        return (try JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }
}

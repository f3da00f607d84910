import FanoutTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Exactly-once writes against the real `fanout-server`: a change repeated with its
/// `Idempotency-Key` is answered the first answer, after a restart too, and on another server
/// of the same PostgreSQL database; its event carries the key to subscribers.
@Suite("Idempotency keys end to end", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct IdempotencyEndToEndTests {
    struct Answer {
        let status: Int
        let replayed: String?
        let body: String
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:] }
        var seq: Int64? { (json["seq"] as? NSNumber)?.int64Value }
        var errorCode: String? { (json["error"] as? [String: Any])?["code"] as? String }
        /// The cart of the answer, as JSON text with sorted keys (comparable across answers).
        var cart: String? {
            (json["cart"]).flatMap { try? JSONSerialization.data(withJSONObject: $0, options: .sortedKeys) }
                .map { String(decoding: $0, as: UTF8.self) }
        }
    }

    static func add(port: Int, cart: String = "c", quantity: Int = 2, key: String) async throws -> Answer {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/carts/\(cart)/items")!)
        request.httpMethod = "POST"
        request.timeoutInterval = 30
        request.httpBody = Data(#"{"sku":"apple","quantity":\#(quantity),"unitPriceCents":150}"#.utf8)
        request.setValue(key, forHTTPHeaderField: "Idempotency-Key")
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as? HTTPURLResponse
        return Answer(
            status: http?.statusCode ?? 0, replayed: http?.value(forHTTPHeaderField: "Idempotent-Replayed"),
            body: String(decoding: data, as: UTF8.self))
    }

    @Test(arguments: EndToEndTests.transports)
    func aRepeatIsAnsweredTheFirstAnswerAlsoAfterARestartAndItsEventCarriesTheKey(transport: String) async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let client = try await SubscribeProcess(port: server.port, arguments: ["--transport", transport])
        await eventually("the client's snapshot") { client.output.first?.type == "snapshot" }

        let first = try await Self.add(port: server.port, key: "order-1")
        #expect(first.status == 200 && first.replayed == nil && first.seq == 1)
        let again = try await Self.add(port: server.port, key: "order-1")
        #expect(again.status == 200)
        #expect(again.replayed == "true")
        #expect(again.body == first.body, "the same body, byte for byte")
        let reused = try await Self.add(port: server.port, quantity: 3, key: "order-1")
        #expect(reused.status == 422 && reused.errorCode == "idempotency_key_reused")
        #expect(await Mutations.add(port: server.port, cart: "c", sku: "pear") == 2)
        await eventually("both events") { client.eventSeqs.count >= 2 }
        #expect(client.eventSeqs == [1, 2], "one event for the key, however often it was sent")
        #expect(client.output.filter { $0.type == "event" }.map(\.idempotencyKey) == ["order-1", nil])

        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        let restarted = try await ServerProcess(arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let afterRestart = try await Self.add(port: restarted.port, key: "order-1")
        #expect(afterRestart.status == 200 && afterRestart.replayed == "true")
        #expect(afterRestart.seq == 1 && afterRestart.cart == first.cart, "the cart as that change left it, not as it is now")
        #expect(try await Mutations.log(port: restarted.port) == [1, 2])
        client.signal(SIGTERM)
        _ = await client.waitForExit()
        restarted.signal(SIGTERM)
        #expect(await restarted.waitForExit() == 0)
    }

    /// `--idempotency-keys-ttl`: a key is answered again while it is kept, and once the server
    /// has forgotten it, a repeat is a new change.
    @Test func aKeyPastItsTimeToLiveIsForgotten() async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--idempotency-keys-ttl", "0.5"])
        let first = try await Self.add(port: server.port, key: "k")
        #expect(first.status == 200 && first.seq == 1)
        var repeated = try await Self.add(port: server.port, key: "k")
        #expect(repeated.replayed == "true" || repeated.seq == 2, "a replay, unless already forgotten")
        try await eventually("the key forgotten") {
            if repeated.replayed == nil { return true }
            repeated = try await Self.add(port: server.port, key: "k")
            return repeated.replayed == nil
        }
        #expect(repeated.status == 200 && repeated.seq == 2, "made again, once")
        #expect(try await Mutations.log(port: server.port) == [1, 2])
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    @Test(.tags(.postgres), .needsPostgreSQL)
    func aKeyUsedOnOneServerIsAnsweredOnAnotherOfTheSameDatabase() async throws {
        let postgres = try await PostgresServer.start()
        postgres.stopWhenTheProcessExits()
        let database = try await postgres.makeDatabase(named: "idempotency")
        let nodes = try await ServerProcess.start(2, arguments: ["--port", "0", "--db", database] + EndToEndTests.fastLeases)
        let client = try await SubscribeProcess(port: nodes[1].port)
        await eventually("the client's snapshot") { client.output.first?.type == "snapshot" }

        let first = try await Self.add(port: nodes[0].port, key: "order-1")
        #expect(first.status == 200 && first.replayed == nil)
        let onB = try await Self.add(port: nodes[1].port, key: "order-1")
        #expect(onB.status == 200 && onB.replayed == "true")
        #expect(onB.seq == first.seq && onB.cart == first.cart)
        let reused = try await Self.add(port: nodes[1].port, quantity: 5, key: "order-1")
        #expect(reused.status == 422 && reused.errorCode == "idempotency_key_reused")

        // 50 at once, spread over both servers: one event.
        let ports = nodes.map(\.port)
        let answers = try await withThrowingTaskGroup(of: Answer.self) { group in
            for index in 0..<50 {
                group.addTask { try await Self.add(port: ports[index % 2], cart: "d", key: "burst") }
            }
            return try await group.reduce(into: [Answer]()) { $0.append($1) }
        }
        #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.filter { $0.status != 200 }.map(\.body).prefix(3))")
        #expect(answers.count(where: { $0.replayed == nil }) == 1)
        #expect(Set(answers.compactMap(\.seq)) == [2])
        #expect(try await Mutations.log(port: nodes[0].port) == [1, 2])
        await eventually("both events on the other server's subscriber") { client.eventSeqs.count >= 2 }
        #expect(client.output.filter { $0.type == "event" }.map(\.idempotencyKey) == ["order-1", "burst"])
        client.signal(SIGTERM)
        _ = await client.waitForExit()
        for node in nodes {
            node.signal(SIGTERM)
            #expect(await node.waitForExit() == 0)
        }
        await postgres.stop()
    }
}

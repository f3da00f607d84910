import CartStore
import FanoutTestSupport
import Foundation
import Testing

@testable import FanoutServer

/// `/subscribe` as a Server-Sent Events stream, against the real server: what an `EventSource`
/// and `curl -N` see.
@Suite("Event streams (SSE)", .timeLimit(.minutes(2)))
struct EventStreamTests {
    @Test func aStreamSendsTheSnapshotThenEventsAndResumesWithLastEventID() async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 5)
        try await withServer(store: store) { port, _ in
            let first = try await EventStreamClient(port: port)
            await eventually("the snapshot") { !first.snapshots.isEmpty }
            #expect(first.status == 200)
            #expect(first.head?.lowercased().contains("content-type: text/event-stream") == true)
            #expect(first.retry == ServerSentEvents.reconnectDelayMilliseconds)
            #expect(first.events.first?.name == "welcome")
            #expect(first.snapshots.first?.id == 1, "a snapshot's id is its seq: resuming after it misses nothing")
            for sku in ["y", "z"] {
                try await store.addItem(cartID: "a", sku: sku, quantity: 1, unitPriceCents: 5)
            }
            await eventually("two events") { first.cartEvents.count == 2 }
            #expect(first.cartEvents.map(\.id) == [2, 3])
            #expect(first.cartEvents.map(\.seq) == [2, 3], "the id is the event's seq")
            let resumeAfter = try #require(first.lastEventID)
            await first.close()

            try await store.addItem(cartID: "a", sku: "w", quantity: 1, unitPriceCents: 5)
            try await store.addItem(cartID: "b", sku: "w", quantity: 1, unitPriceCents: 5)
            // As EventSource reconnects: Last-Event-ID wins over since.
            let second = try await EventStreamClient(port: port, path: "/subscribe?since=0", headers: [("Last-Event-ID", "\(resumeAfter)")])
            await eventually("the missed events") { second.cartEvents.count == 2 }
            #expect(second.snapshots.isEmpty)
            #expect(second.cartEvents.map(\.id) == [4, 5])
            try await store.addItem(cartID: "a", sku: "v", quantity: 1, unitPriceCents: 5)
            await eventually("the live one") { second.cartEvents.count == 3 }
            #expect(second.cartEvents.map(\.id) == [4, 5, 6])
            await second.close()
        }
    }

    /// The ordering promise across the log/live boundary, with writers going on meanwhile.
    @Test func resumingUnderConcurrentWritersMissesNothingAndRepeatsNothing() async throws {
        let store = try CartStore.inMemory()
        try await writeConcurrently(to: store, writers: 2, perWriter: 50)
        try await withServer(store: store) { port, _ in
            async let writes: Void = writeConcurrently(to: store, writers: 4, perWriter: 50)
            let all = try await EventStreamClient(port: port, path: "/subscribe?since=30")
            let onlyW1 = try await EventStreamClient(port: port, path: "/subscribe?since=30&carts=w1")
            try await writes
            await eventually("every event after 30") { all.cartEvents.count >= 270 }
            #expect(all.cartEvents.compactMap(\.id) == Array(31...300))
            let w1 = try await store.events(after: 30, limit: 1_000, carts: ["w1"])
            guard case .events(let expected, _) = w1 else {
                Issue.record("the log was pruned")
                return
            }
            await eventually("every w1 event after 30") { onlyW1.cartEvents.count >= expected.count }
            #expect(onlyW1.cartEvents.compactMap(\.id) == expected.map(\.seq))
            await all.close()
            await onlyW1.close()
        }
    }

    @Test func anIDFromPrunedHistoryGetsASnapshotAndHeartbeatsAreComments() async throws {
        let store = try CartStore.inMemory()
        for index in 0..<10 {
            try await store.addItem(cartID: "c", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
        }
        try await store.pruneEvents(keepingLast: 3)
        try await withServer(store: store) { port, _ in
            let stream = try await EventStreamClient(port: port, headers: [("Last-Event-ID", "2")])
            await eventually("the snapshot") { !stream.snapshots.isEmpty }
            #expect(stream.snapshots.first?.id == 10)
            #expect(stream.snapshots.first?.data.contains(#""reason":"since_too_old""#) == true)
            await eventually("a heartbeat") { !stream.comments.isEmpty }
            #expect(stream.comments.first == "heartbeat 10")
            await stream.close()
        }
    }

    /// A tab that stops reading: its stream fills, is closed and counted, while writers and the
    /// other streams go on.
    @Test func aStreamThatStopsReadingIsDroppedWhileOthersGoOn() async throws {
        let store = try CartStore.inMemory()
        try await withServer({ $0.ringSize = 256 }, store: store) { port, server in
            let stalled = try await EventStreamClient(port: port, receiveBuffer: 2_048)
            let reader = try await EventStreamClient(port: port)
            await eventually("both streams") { !stalled.snapshots.isEmpty && !reader.snapshots.isEmpty }
            try await stalled.stopReading()
            let name = String(repeating: "n", count: 200)
            var written = 0
            // Bounded: stop once the stalled stream is closed (or after 20 000 writes).
            while server.hub.stats.subscribers == 2, written < 20_000 {
                try await store.addItem(cartID: "c\(written / 500)", sku: "s\(written % 500)", quantity: 1, unitPriceCents: 1, name: name)
                written += 1
                // The reading stream is a reader that keeps up: on a loaded machine this test's
                // writes can outrun it, so they wait whenever it is half the ring behind.
                if written - reader.cartEvents.count > 128 {
                    let target = written - 64
                    // A reader that cannot catch up has failed the test: stop writing.
                    guard await eventually("the reader to keep up", { reader.cartEvents.count >= target }) else { break }
                }
            }
            let ended = server.hub.stats.transports["sse"]?.ended ?? [:]
            #expect(server.hub.stats.subscribers == 1, "still connected after \(written) writes; ended: \(ended.filter { $0.value > 0 })")
            #expect((ended["leaseExpired"] ?? 0) + (ended["tooSlow"] ?? 0) == 1, "\(ended)")
            // Ended, and its connection released although its client never reads again (the
            // error event does not fit): not a descriptor and kernel buffers held for as long
            // as the client stays.
            await eventually(timeout: .seconds(20), "the stalled stream's connection closed") {
                server.hub.stats.connections == 1
            }
            // The writes never waited for it, and the reading stream has every one of them.
            await eventually("the reader's events") { reader.cartEvents.count == written }
            #expect(reader.cartEvents.compactMap(\.id) == Array(1...Int64(written)))
            await reader.close()
            await stalled.close()
        }
    }

    /// A stalled stream with little traffic ends at its lease too: the kernel holds at most a
    /// fixed send buffer of it, so "not drained" shows after a few hundred KiB of events, not
    /// after the megabytes an autotuned buffer takes (the ring here is far larger than the
    /// writes, so only the lease can end it).
    @Test func aStalledStreamWithLittleTrafficEndsAtItsLease() async throws {
        let store = try CartStore.inMemory()
        try await withServer(
            {
                $0.leaseTTL = .seconds(1)
                $0.ringSize = 100_000
            }, store: store
        ) { port, server in
            let stalled = try await EventStreamClient(port: port, receiveBuffer: 2_048)
            // On a loaded machine the 1 s lease may end the stream before its snapshot is read,
            // or before it stops reading: the checks below hold all the same.
            await eventually("the snapshot") { !stalled.snapshots.isEmpty || stalled.isClosed }
            try? await stalled.stopReading()
            let name = String(repeating: "n", count: 150)
            // About 600 KiB of events at most.
            for index in 0..<2_000 where server.hub.stats.subscribers == 1 {
                try await store.addItem(cartID: "c\(index / 500)", sku: "s\(index % 500)", quantity: 1, unitPriceCents: 1, name: name)
            }
            await eventually("the stalled stream ended") { server.hub.stats.subscribers == 0 }
            #expect(server.hub.stats.ended["leaseExpired"] == 1, "\(server.hub.stats.ended.filter { $0.value > 0 })")
            await eventually(timeout: .seconds(20), "its connection closed") { server.hub.stats.connections == 0 }
            await stalled.close()
        }
    }

    @Test(arguments: [
        ("/subscribe?since=abc", 400, "invalid_since"),
        ("/subscribe?since=-1", 400, "invalid_since"),
        ("/subscribe?carts=", 400, "invalid_carts"),
        ("/subscribe?carts=a%20b", 400, "invalid_cart_id"),
    ])
    func badQueryValuesGetTheirJSONErrors(path: String, status: Int, code: String) async throws {
        try await withServer { port, _ in
            let stream = try await EventStreamClient(port: port, path: path)
            await eventually("the refusal") { stream.isClosed }
            #expect(stream.status == status)
            #expect(stream.refusalBody?.contains(#""code":"\#(code)""#) == true, "\(stream.refusalBody ?? "")")
        }
    }

    @Test func theTokenAndTheOriginAreCheckedAndAllowedOriginsGetCORS() async throws {
        try await withServer({
            $0.token = "s3cret"
            $0.allowedOrigins = ["http://localhost:3000"]
        }) { port, _ in
            let missing = try await EventStreamClient(port: port)
            await eventually("the refusal") { missing.isClosed }
            #expect(missing.status == 401)
            let foreign = try await EventStreamClient(
                port: port, path: "/subscribe?token=s3cret", headers: [("Origin", "http://evil.example")])
            await eventually("the refusal") { foreign.isClosed }
            #expect(foreign.status == 403)
            // EventSource cannot set headers: the token comes in the query.
            let page = try await EventStreamClient(
                port: port, path: "/subscribe?token=s3cret", headers: [("Origin", "http://localhost:3000")])
            await eventually("the welcome") { !page.events.isEmpty }
            #expect(page.status == 200)
            #expect(page.head?.contains("Access-Control-Allow-Origin: http://localhost:3000") == true)
            await page.close()
        }
    }

    @Test func aPlainGETOfSubscribeSaysHowToSubscribe() async throws {
        try await withServer { port, _ in
            let answer = try await RawHTTP.exchange(
                port: port, Array("GET /subscribe HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8))
            #expect(answer.status == 406)
            #expect(answer.text.contains(#""code":"not_acceptable""#))
        }
    }

    /// A client that closes its stream (a FIN, or a reset) is seen at once, not at the next
    /// heartbeat: the heartbeat here is far longer than the wait, so only the close itself can
    /// end the subscriber in time.
    @Test(arguments: [false, true])
    func aClosedStreamEndsAtOnceAsPeerClosed(reset: Bool) async throws {
        let store = try CartStore.inMemory()
        try await withServer(
            {
                $0.heartbeatInterval = .seconds(30)
                $0.leaseTTL = .seconds(60)
            }, store: store
        ) { port, server in
            let stream = try await EventStreamClient(port: port)
            await eventually("the subscriber counted") { server.hub.stats.subscribers == 1 }
            await eventually("the welcome") { !stream.events.isEmpty }
            // Whatever a client sends after its request is read and dropped: the stream goes on.
            try await stream.send(Array(repeating: UInt8(ascii: "x"), count: 256 * 1024))
            try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 1)
            await eventually("the event after the client's bytes") { stream.cartEvents.count == 1 }
            #expect(server.hub.stats.subscribers == 1)
            if reset { await stream.reset() } else { await stream.close() }
            let ended = await eventually(timeout: .seconds(3), "the subscriber's end") { server.hub.stats.subscribers == 0 }
            #expect(ended, "the server noticed the \(reset ? "reset" : "FIN") only at a write")
            #expect(server.hub.stats.ended["peerClosed"] == 1, "\(server.hub.stats.ended.filter { $0.value > 0 })")
            await eventually(timeout: .seconds(3), "the connection closed") { server.hub.stats.connections == 0 }
        }
    }

    @Test func statsCountSubscribersByTransport() async throws {
        try await withServer { port, server in
            let stream = try await EventStreamClient(port: port)
            let socket = TestSubscriber(port: port)
            try await socket.subscribe()
            await eventually("both subscribed") { !stream.snapshots.isEmpty && !socket.snapshots.isEmpty }
            #expect(server.hub.stats.transports["sse"]?.subscribers == 1)
            #expect(server.hub.stats.transports["websocket"]?.subscribers == 1)
            await stream.close()
            await eventually("the stream's end counted") { server.hub.stats.transports["sse"]?.ended["peerClosed"] == 1 }
            await socket.close()
        }
    }
}

/// `GET /events?since=N&wait=S`: a long-poll.
@Suite("Long-poll", .timeLimit(.minutes(2)))
struct LongPollTests {
    static func poll(_ port: Int, _ query: String) async throws -> (status: Int?, body: [String: Any]) {
        let answer = try await RawHTTP.exchange(
            port: port, Array("GET /events?\(query) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8), timeout: 70)
        let body = answer.text.components(separatedBy: "\r\n\r\n").dropFirst().joined()
        return (answer.status, (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:])
    }

    static func seqs(_ body: [String: Any]) -> [Int] {
        (body["events"] as? [[String: Any]] ?? []).compactMap { $0["seq"] as? Int }
    }

    @Test func aPollWaitsForTheNextCommitOfItsCarts() async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 1)
        try await withServer(store: store) { port, server in
            // Events exist: answered at once.
            let now = try await Self.poll(port, "since=0&wait=30")
            #expect(Self.seqs(now.body) == [1])
            async let parked = Self.poll(port, "since=1&carts=a&wait=30")
            await eventually("the poll parked") { server.hub.stats.waitingPolls == 1 }
            // Another cart's commit wakes it, and it waits on.
            try await store.addItem(cartID: "b", sku: "x", quantity: 1, unitPriceCents: 1)
            await eventually("parked again") { server.hub.longPolls.count == 1 }
            try await store.addItem(cartID: "a", sku: "y", quantity: 1, unitPriceCents: 1)
            let answered = try await parked
            #expect(answered.status == 200)
            #expect(Self.seqs(answered.body) == [3])
            #expect(server.hub.stats.waitingPolls == 0)
        }
    }

    @Test func aPollWithNothingNewAnswersEmptyWhenItsWaitEnds() async throws {
        try await withServer { port, server in
            let answered = try await Self.poll(port, "since=0&wait=1")
            #expect(answered.status == 200)
            #expect(Self.seqs(answered.body).isEmpty)
            #expect(answered.body["nextSince"] as? Int == 0)
            #expect(server.hub.longPolls.count == 0)
        }
    }

    /// Waiting polls and subscribers share `--max-subscribers` (with an open-files limit, the
    /// connections left once those kept for requests are set aside): 896 WebSockets and 200
    /// waiting polls took the connections requests were promised, and `/healthz` waited in the
    /// backlog. Past the room a poll that would wait is 503 `server_full`, as a subscriber is.
    @Test func waitingPollsAndSubscribersShareTheRoom() async throws {
        try await withServer({ $0.maxSubscribers = 2 }) { port, server in
            let subscriber = TestSubscriber(port: port)
            try await subscriber.subscribe()
            async let parked = Self.poll(port, "since=0&wait=30")
            await eventually("the poll parked") { server.hub.longPolls.count == 1 }
            let refused = try await Self.poll(port, "since=0&wait=30")
            #expect(refused.status == 503)
            #expect((refused.body["error"] as? [String: Any])?["code"] as? String == "server_full")
            let another = TestSubscriber(port: port)
            _ = try? await another.closeFrame()
            #expect(server.hub.subscriberCount == 1, "a subscriber past the room is refused too")
            // A poll that need not wait is answered, whatever the room.
            let store = server.store
            try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 1)
            #expect(Self.seqs(try await parked.body) == [1])
            #expect(Self.seqs(try await Self.poll(port, "since=0&wait=30").body) == [1])
            await subscriber.close()
        }
    }

    @Test(arguments: ["wait=61", "wait=-1", "wait=soon"])
    func aBadWaitIsRefused(_ query: String) async throws {
        try await withServer { port, _ in
            let answered = try await Self.poll(port, query)
            #expect(answered.status == 422 || answered.status == 400)
            #expect(answered.body["error"] != nil)
        }
    }
}

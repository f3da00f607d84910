import CartStore
import FanoutTestSupport
import Foundation
import Testing

@testable import FanoutServer

/// The extremes of every number a client sends (`since`, `limit`, `wait`, quantities, prices,
/// versions, `If-Match`), on every route and transport: each is answered with its own 4xx or,
/// for a `since` ahead of the log, the documented snapshot, and the server lives on. One
/// `since` of 2^63−1 used to end the process with an arithmetic overflow.
@Suite("Numeric extremes", .timeLimit(.minutes(2)))
struct NumericExtremesTests {
    static let max = "9223372036854775807"
    static let maxMinusOne = "9223372036854775806"
    static let min = "-9223372036854775808"
    /// One past Int64: no longer a whole number the server can hold.
    static let pastMax = "9223372036854775808"
    static let huge = "99999999999999999999999999999999"

    /// The status and error code of a plain HTTP exchange.
    static func answer(_ port: Int, _ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil) async throws
        -> (status: Int?, code: String?)
    {
        var request = "\(method) \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        for (name, value) in headers { request += "\(name): \(value)\r\n" }
        if let body { request += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n" }
        request += "\r\n" + (body ?? "")
        let answer = try await RawHTTP.exchange(port: port, Array(request.utf8))
        let text = answer.text.components(separatedBy: "\r\n\r\n").dropFirst().joined()
        let object = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        return (answer.status, (object?["error"] as? [String: Any])?["code"] as? String)
    }

    /// A server with one committed event, so that "ahead of the log" and "in the log" differ.
    static func withOneEvent(_ body: @escaping @Sendable (_ port: Int, _ server: FanoutServerApp) async throws -> Void) async throws {
        let store = try CartStore.inMemory()
        try await store.addItem(cartID: "a", sku: "x", quantity: 1, unitPriceCents: 1)
        try await withServer(store: store) { port, server in
            try await body(port, server)
            // Still alive, and still writing.
            #expect(try await Self.answer(port, "GET", "/healthz").status == 200)
            #expect(
                try await Self.answer(port, "POST", "/carts/a/items", body: #"{"sku":"y","quantity":1,"unitPriceCents":1}"#).status == 200)
        }
    }

    @Test func eventLogQueryNumbers() async throws {
        try await Self.withOneEvent { port, _ in
            let expected: [(String, Int, String?)] = [
                ("since=\(Self.max)", 409, "since_ahead"),
                ("since=\(Self.maxMinusOne)", 409, "since_ahead"),
                ("since=\(Self.min)", 422, "invalid_since"),
                ("since=-1", 422, "invalid_since"),
                ("since=\(Self.pastMax)", 422, "invalid_since"),
                ("since=\(Self.huge)", 422, "invalid_since"),
                ("since=abc", 422, "invalid_since"),
                ("since=\(Self.max)&wait=1", 409, "since_ahead"),
                ("limit=\(Self.max)", 422, "invalid_limit"),
                ("limit=\(Self.min)", 422, "invalid_limit"),
                ("limit=0", 422, "invalid_limit"),
                ("limit=-1", 422, "invalid_limit"),
                ("limit=\(Self.pastMax)", 400, "malformed_request"),
                ("wait=\(Self.max)", 422, "invalid_wait"),
                ("wait=\(Self.min)", 422, "invalid_wait"),
                ("wait=\(Self.pastMax)", 400, "malformed_request"),
            ]
            for (query, status, code) in expected {
                let answer = try await Self.answer(port, "GET", "/events?\(query)")
                #expect(answer.status == status, "GET /events?\(query)")
                #expect(answer.code == code, "GET /events?\(query)")
            }
            // The largest page there is: everything, once.
            #expect(try await Self.answer(port, "GET", "/events?since=0&limit=10000").status == 200)
        }
    }

    @Test func mutationNumbers() async throws {
        try await Self.withOneEvent { port, _ in
            for number in [Self.max, Self.min, Self.pastMax, Self.huge, "1e308", "-1e308", "0.5", "-1", "0"] {
                let add = try await Self.answer(
                    port, "POST", "/carts/a/items", body: #"{"sku":"z","quantity":\#(number),"unitPriceCents":1}"#)
                #expect([400, 422].contains(add.status ?? 0), "quantity \(number): \(add)")
                let price = try await Self.answer(
                    port, "POST", "/carts/a/items", body: #"{"sku":"z","quantity":1,"unitPriceCents":\#(number)}"#)
                #expect(number == "0" ? price.status == 200 : [400, 422].contains(price.status ?? 0), "price \(number): \(price)")
                let set = try await Self.answer(port, "PATCH", "/carts/a/items/x", body: #"{"quantity":\#(number)}"#)
                // 0 removes the line (then x is gone: 404 for the numbers after it).
                #expect(number == "0" ? set.status == 200 : [400, 404, 422].contains(set.status ?? 0), "set \(number): \(set)")
            }
            // The largest quantity twice on one line: the sum is refused, not wrapped.
            #expect(
                try await Self.answer(port, "POST", "/carts/b/items", body: #"{"sku":"x","quantity":10000,"unitPriceCents":1000000000}"#)
                    .status == 200)
            let overflow = try await Self.answer(
                port, "POST", "/carts/b/items", body: #"{"sku":"x","quantity":10000,"unitPriceCents":1000000000}"#)
            #expect(overflow.status == 409)
            #expect(overflow.code == "quantity_overflow")
            for (version, status, code) in [
                (Self.max, 412, "version_conflict"), (Self.pastMax, 400, "malformed_request"),
                (Self.min, 400, "malformed_request"), ("\"-1\"", 400, "malformed_request"),
            ] {
                let answer = try await Self.answer(port, "DELETE", "/carts/b", headers: ["If-Match": version])
                #expect(answer.status == status, "If-Match \(version)")
                #expect(answer.code == code, "If-Match \(version)")
            }
        }
    }

    @Test(arguments: ["since", "Last-Event-ID"])
    func eventStreamResumeNumbers(_ name: String) async throws {
        try await Self.withOneEvent { port, _ in
            func open(_ value: String) async throws -> EventStreamClient {
                name == "since"
                    ? try await EventStreamClient(port: port, path: "/subscribe?since=\(value)")
                    : try await EventStreamClient(port: port, headers: [("Last-Event-ID", value)])
            }
            for ahead in [Self.max, Self.maxMinusOne] {
                let stream = try await open(ahead)
                await eventually("the snapshot for \(name) \(ahead)") { !stream.snapshots.isEmpty || stream.isClosed }
                #expect(
                    stream.snapshots.first?.data.contains(#""reason":"since_ahead""#) == true,
                    "\(name) \(ahead): \(stream.refusalBody.map { "closed without a snapshot: \($0)" } ?? "no snapshot")")
                await stream.close()
            }
            for refused in [Self.min, "-1", Self.pastMax, Self.huge] {
                let stream = try await open(refused)
                await eventually("the refusal of \(name) \(refused)") { stream.isClosed }
                #expect(stream.status == 400, "\(name) \(refused)")
                #expect(stream.refusalBody?.contains(#""code":"invalid_since""#) == true, "\(name) \(refused)")
            }
        }
    }

    @Test func webSocketSubscribeNumbers() async throws {
        try await Self.withOneEvent { port, _ in
            for ahead in [Int64.max, Int64.max - 1] {
                let subscriber = TestSubscriber(port: port)
                try await subscriber.subscribe(since: ahead)
                await eventually("the snapshot for since \(ahead)") { !subscriber.snapshots.isEmpty }
                #expect(subscriber.snapshots.first?.reason == .sinceAhead)
                await subscriber.close()
            }
            // As an event stream's `since` (and PROTOCOL.md): `invalid_since`, whatever is wrong
            // with it, and the connection stays open for a subscription that is right.
            for refused in [Self.min, "-1", Self.pastMax, Self.huge, "1e308", "0.5", #""12""#, "true"] {
                let socket = try RawWebSocket(port: port)
                let frames = try await onThreadOfItsOwn { () throws -> [RawWebSocket.Frame] in
                    _ = try socket.upgrade()
                    try socket.sendText(#"{"type":"subscribe","since":\#(refused)}"#)
                    let refusal = try socket.frames { $0.isError || $0.opcode == 0x8 }
                    try socket.sendText(#"{"type":"subscribe","since":0}"#)
                    return refusal + (try socket.frames { $0.text.contains(#""type":"event""#) || $0.isError || $0.opcode == 0x8 })
                }
                let errors = frames.filter(\.isError).map(\.text)
                #expect(errors.count == 1, "since \(refused): \(errors)")
                #expect(errors.first?.contains(#""code":"invalid_since""#) == true, "since \(refused): \(errors)")
                #expect(errors.first?.contains("whole number") == true, "since \(refused): \(errors)")
                #expect(frames.last?.text.contains(#""type":"event""#) == true, "since \(refused): then subscribed")
            }
        }
    }
}

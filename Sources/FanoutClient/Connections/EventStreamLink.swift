import FanoutProtocol
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// One event stream: `GET /subscribe` with `Accept: text/event-stream` and `Last-Event-ID`,
/// read until the server ends it.
struct EventStreamLink {
    /// `http://host:port/subscribe?carts=…`
    let url: URL
    let trust: ServerTrust
    let token: String?
    let lastEventID: Int64?

    /// Runs the stream, handing each event's data to `handle`, until the server ends it.
    ///
    /// - Throws: `RemoteStoreError`: `refused` when the server answered with an error,
    ///   `unreachable` when no connection could be made or it broke.
    func run(_ handle: (String) async throws -> Void) async throws {
        let endpoint = try Endpoint(url, trust: trust)
        let channel = try await endpoint.connectHTTP()
        var headers = HTTPHeaders([("Host", endpoint.hostHeader), ("Accept", "text/event-stream")])
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let lastEventID { headers.add(name: "Last-Event-ID", value: "\(lastEventID)") }
        let target = Endpoint.target(of: url)
        try await channel.executeThenClose { inbound, outbound in
            do {
                try await outbound.write(.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: headers)))
                try await outbound.write(.end(nil))
            } catch {
                // A TLS handshake that failed closes the channel before the request goes out: the
                // reason (a certificate refused) comes inbound, and says more than a closed channel.
                for try await _ in inbound {}
                throw error
            }
            var parser = EventStreamParser(maxLine: WebSocketLink.maxMessageSize)
            var refusal: (status: Int, body: [UInt8])?
            for try await part in inbound {
                switch part {
                case .head(let head) where head.status != .ok:
                    refusal = (Int(head.status.code), [])
                case .head:
                    break
                case .body(let buffer):
                    if refusal != nil {
                        // An error answer is small; a long one is cut, not kept whole.
                        if refusal!.body.count < 64 << 10 { refusal?.body += buffer.readableBytesView }
                        continue
                    }
                    for event in try parser.feed(buffer) { try await handle(event.data) }
                case .end:
                    if let refusal { throw RemoteStoreError.answer(status: refusal.status, body: refusal.body) }
                    return
                }
            }
        }
    }
}

/// Splits a `text/event-stream` body into events (the HTML standard's parsing, for the fields
/// the server sends: `id`, `event`, `data`; comments and `retry` are skipped).
struct EventStreamParser {
    struct Event: Equatable, Sendable {
        var id: String?
        var name = "message"
        var data = ""
    }

    let maxLine: Int
    private var line: [UInt8] = []
    private var event = Event()
    private var hasData = false

    init(maxLine: Int) {
        self.maxLine = maxLine
    }

    /// The events completed by `buffer`.
    mutating func feed(_ buffer: ByteBuffer) throws -> [Event] {
        var events: [Event] = []
        for byte in buffer.readableBytesView {
            guard byte == UInt8(ascii: "\n") else {
                line.append(byte)
                if line.count > maxLine { throw ProtocolViolation(description: "a stream line longer than \(maxLine) bytes") }
                continue
            }
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            if line.isEmpty {
                if hasData { events.append(event) }
                event = Event()
                hasData = false
            } else {
                take(String(decoding: line, as: UTF8.self))
            }
            line.removeAll(keepingCapacity: true)
        }
        return events
    }

    private mutating func take(_ text: String) {
        guard !text.hasPrefix(":") else { return }
        var field = text[...]
        var value: Substring = ""
        if let colon = text.firstIndex(of: ":") {
            field = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.first == " " { value = value.dropFirst() }  // one space, as the standard says
        }
        switch field {
        case "id": event.id = String(value)
        case "event": event.name = String(value)
        case "data":
            event.data += hasData ? "\n" + value : String(value)
            hasData = true
        default: break
        }
    }
}

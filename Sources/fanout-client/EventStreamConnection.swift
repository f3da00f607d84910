import FanoutProtocol
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// One connection of `subscribe --transport sse`: `GET /subscribe` with
/// `Accept: text/event-stream` and `Last-Event-ID` (the last printed seq), read and printed
/// until the server ends the stream. The session around it reconnects and resumes, as for a
/// WebSocket.
struct EventStreamConnection {
    /// `http://host:port/subscribe?carts=…`
    let url: URL
    let token: String?
    let lastEventID: Int64?
    let printer: EventPrinter
    let received: MessageCounter

    /// The longest line taken: far above any the server sends.
    static let maxLine = SubscriberSession.maxMessageSize

    func run() async throws {
        guard let host = url.host else { throw ClientFailure("bad URL \(url)") }
        let port = url.port ?? 80
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        var headers = HTTPHeaders([("Host", "\(host):\(port)"), ("Accept", "text/event-stream")])
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let lastEventID { headers.add(name: "Last-Event-ID", value: "\(lastEventID)") }
        var target = url.path.isEmpty ? "/" : url.path
        if let query = url.query { target += "?\(query)" }
        try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: headers)))
            try await outbound.write(.end(nil))
            var parser = EventStreamParser(maxLine: Self.maxLine)
            var refusal: (status: HTTPResponseStatus, body: String)?
            for try await part in inbound {
                switch part {
                case .head(let head) where head.status != .ok:
                    refusal = (head.status, "")
                case .head:
                    break
                case .body(let buffer):
                    if refusal != nil {
                        refusal?.body += String(buffer: buffer)
                        continue
                    }
                    for event in try parser.feed(buffer) { try handle(event) }
                case .end:
                    if let refusal { throw Self.failure(refusal.status, refusal.body) }
                    return
                }
            }
        }
    }

    private func handle(_ event: EventStreamParser.Event) throws {
        let message: ServerMessage
        do {
            message = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(event.data.utf8))
        } catch {
            throw ProtocolViolation(description: "an event's data is not a server message: \(event.data.prefix(80))")
        }
        received.increment()
        try printer.handle(message, raw: event.data)
    }

    /// A refused stream: what retrying cannot fix (the token, the origin, a bad value) ends the
    /// program; what may pass (a full, restarting or failing server) is retried. The server's
    /// error code decides; without one (an answer from something in between), a 5xx is retried.
    static func failure(_ status: HTTPResponseStatus, _ body: String) -> any Error {
        let answer = try? FanoutJSON.decoder().decode(ErrorResponse.self, from: Data(body.utf8))
        let detail = answer.map { "\($0.error.code): \($0.error.message)" } ?? "\(status.code)"
        let code = answer.flatMap { FanoutErrorCode(rawValue: $0.error.code) }
        guard code?.isRetryable ?? (status.code >= 500) else {
            return ClientFailure("the server refused the event stream (\(status.code) \(detail))", code: code)
        }
        return StreamRefused(description: "\(status.code) \(detail)")
    }
}

/// A stream the server refused for now (503 and the like): retried.
struct StreamRefused: Error, CustomStringConvertible {
    let description: String
}

/// Splits a `text/event-stream` body into events (the HTML standard's parsing, for the fields
/// the server sends: `id`, `event`, `data`; comments and `retry` are skipped).
struct EventStreamParser {
    struct Event: Equatable {
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

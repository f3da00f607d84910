import FanoutProtocol
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1

/// Server-Sent Events (the `text/event-stream` of the HTML standard) at `/subscribe`: what a
/// request for a stream asks for, and how a server message is framed as an event.
///
/// Each message is one event: `id:` the seq a client resumes after (an event's, a snapshot's
/// on its last part), `event:` the message's `type` (but `server-error` for an error: an
/// `EventSource` keeps `error` for its own connection errors), and `data:` the same JSON as the
/// WebSocket's. A browser's `EventSource` sends the last `id:` back as `Last-Event-ID` when it
/// reconnects: the server's `since`. Heartbeats are comments, which `EventSource` ignores but
/// which keep proxies from timing the stream out.
enum ServerSentEvents {
    /// How long a browser waits before reconnecting, in milliseconds (the stream's `retry:`).
    static let reconnectDelayMilliseconds = 1_000

    static func frame(_ message: WireMessage) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(message.json.readableBytes + 48)
        if message.type == .heartbeat {
            buffer.writeString(": heartbeat \(message.seq ?? 0)\n\n")
            return buffer
        }
        if let seq = message.seq { buffer.writeString("id: \(seq)\n") }
        buffer.writeString("event: \(eventName(message.type))\ndata: ")
        // The JSON is on one line: the encoder escapes every newline inside strings.
        buffer.writeImmutableBuffer(message.json)
        buffer.writeString("\n\n")
        return buffer
    }

    static func eventName(_ type: ServerMessage.Kind) -> String {
        type == .error ? "server-error" : type.rawValue
    }

    /// Whether a request for `path` with these `Accept` values asks `/subscribe` for an event
    /// stream: the one test, for a connection's first request (NIO's head) and a later one
    /// (Hummingbird's).
    static func isStreamRequest(path: Substring, accept: some Sequence<some StringProtocol>) -> Bool {
        path == Substring(SubscribeEndpoint.path) && accept.contains { $0.lowercased().hasPrefix("text/event-stream") }
    }

    static func isStreamRequest(_ head: HTTPRequestHead) -> Bool {
        isStreamRequest(path: head.uri.split(separator: "?", maxSplits: 1).first ?? "", accept: head.headers[canonicalForm: "accept"])
    }

    static func isStreamRequest(_ request: Request) -> Bool {
        isStreamRequest(path: Substring(request.uri.path), accept: request.headers[values: .accept])
    }

    /// What a stream request subscribes to: `carts=a,b` (absent: all the credential may see),
    /// and where it resumes: `Last-Event-ID`, which a browser sends on its own reconnects, else
    /// `since=N`.
    struct Subscription: Sendable {
        /// The cart filter, as the credential allows it (nil: every cart).
        var carts: Set<String>?
        var since: Int64?
        /// Presence on its carts: `presence=1`, `presenceKey=K`, `presenceState=<JSON object>`.
        var presence: PresenceRequest?
    }

    /// The subscription a request asks for, as `grant` allows it; throws the 400 to answer for
    /// bad values, the 403 for carts the credential may not see.
    static func subscription(of request: Request, endpoint: SubscribeEndpoint, grant: Grant) throws -> Subscription {
        let query = request.uri.queryParameters
        let carts = query.get("carts").map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
        let resumeAfter = request.headers[.lastEventID].map { ($0, "Last-Event-ID") } ?? query.get("since").map { ($0, "since") }
        var since: Int64?
        if let (text, name) = resumeAfter {
            guard let value = Int64(text.trimmingCharacters(in: .whitespaces)) else {
                throw APIError(.invalidSince, "\(name) must be \(ClientMessage.sinceRule) (got \(text.prefix(40)))", status: .badRequest)
            }
            since = value
        }
        // An empty list (`carts=`) is refused like the WebSocket's `"carts":[]`.
        let asked = carts.map { $0 == [""] ? [] : $0 }
        if let problem = endpoint.validate(carts: asked, since: since) {
            // 400 for every refused value of a stream request, as docs/PROTOCOL.md says.
            throw APIError(problem, status: .badRequest)
        }
        do {
            return Subscription(carts: try grant.readable(asked.map(Set.init)), since: since, presence: try presence(in: query))
        } catch {
            throw APIError(error)
        }
    }
}

extension ServerSentEvents {
    /// The presence a stream's query asks for, if any: `presence=1` (or `true`), `presenceKey`,
    /// `presenceState` (a JSON object); either of the last two asks for presence by itself.
    static func presence(in query: Parameters) throws(FanoutError) -> PresenceRequest? {
        let flag = query.get("presence")
        let key = query.get("presenceKey")
        let stateText = query.get("presenceState")
        if let flag, !["1", "true"].contains(flag) {
            guard ["0", "false"].contains(flag) else {
                throw FanoutError(.invalidPresence, "presence is 1 or 0 (got \(CartLimits.quoted(flag)))")
            }
            return nil
        }
        guard flag != nil || key != nil || stateText != nil else { return nil }
        var state: PresenceState = [:]
        if let stateText {
            guard let decoded = try? FanoutJSON.decoder().decode(PresenceState.self, from: Data(stateText.utf8)) else {
                throw FanoutError(.invalidPresenceState, "presenceState is a JSON object, URL-encoded")
            }
            state = decoded
        }
        let request = PresenceRequest(key: key, state: state)
        try Subscriber.check(request)
        return request
    }
}

extension HTTPField.Name {
    static let lastEventID = Self("Last-Event-ID")!
}

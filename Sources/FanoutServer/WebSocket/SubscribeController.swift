import CartStore
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOWebSocket

/// `/subscribe`: the WebSocket through which remote subscribers follow the event log.
///
/// No task lives as long as a connection. `FanoutChannel` checks the upgrade request here, and
/// a `SubscriberHandler` on the connection's event loop then reads the client's messages
/// (every one renews the lease) and closes the connection when its outbox closes. The first
/// valid `subscribe` starts a writer task that sends the snapshot or backlog and what queued
/// meanwhile, then hands the connection to its event loop's fan-out and ends. See
/// docs/PROTOCOL.md.
struct SubscribeController: Sendable {
    static let path = "/subscribe"

    let store: CartStore
    let hub: FanoutHub
    let configuration: ServerConfiguration
    let access: AccessPolicy

    /// Throws the `APIError` to answer instead of upgrading `request` (it asks for a WebSocket).
    func checkUpgrade(_ request: Request) throws {
        guard request.uri.path == Self.path else {
            throw APIError(.notFound, code: "not_found", "no WebSocket at \(request.uri.path.prefix(100))")
        }
        guard request.method == .get else {
            throw APIError(.methodNotAllowed, code: "method_not_allowed", "a WebSocket upgrade is a GET")
        }
        try access.check(request, requiresToken: true)
        guard !hub.isShuttingDown else {
            throw APIError(.serviceUnavailable, code: "shutting_down", "the server is shutting down")
        }
        guard hub.subscriberCount < configuration.maxSubscribers else {
            throw APIError(.serviceUnavailable, code: "server_full", "the server has its maximum of \(configuration.maxSubscribers) subscribers")
        }
    }

    /// The problem with a `subscribe` message's fields, if any: an error code and its message.
    func validate(carts: [String]?, since: Int64?) -> (code: String, message: String)? {
        if let since, since < 0 {
            return ("invalid_since", "since must be ≥ 0 (got \(since))")
        }
        guard let carts else { return nil }
        if carts.isEmpty {
            return ("invalid_carts", "carts must name at least one cart, or be left out for all carts")
        }
        if carts.count > configuration.maxCartsPerSubscription {
            return ("too_many_carts", "a subscription may name at most \(configuration.maxCartsPerSubscription) carts (got \(carts.count))")
        }
        if let bad = carts.first(where: { !CartLimits.isValidIdentifier($0) }) {
            return ("invalid_cart_id", "cart ids are 1–64 characters of A-Z a-z 0-9 . _ - (got \"\(bad.prefix(80))\")")
        }
        return nil
    }

    // MARK: Writer

    /// Starts the task that sends `subscriber` its snapshot or backlog (the `.start` that
    /// `hub.subscribe` queues), then what queued meanwhile, then makes it live and ends.
    func startWriter(for subscriber: Subscriber, connection: SubscriberConnection, logger: Logger) {
        Task {
            // The logger with the subscriber's id is a metadata dictionary of its own: made here,
            // it lives as long as the writer, not as long as the connection.
            let logger = logger.withSubscriber(subscriber.id)
            do {
                try await write(to: connection, subscriber: subscriber)
            } catch {
                logger.debug("subscriber writer ended", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Sends the snapshot or backlog, then what queued meanwhile, then goes live: from then on
    /// the connection's event loop writes it frames from the ring, and no task is left.
    ///
    /// Until live, every write is awaited, so a slow client paces this task and the bounded
    /// outbox (not NIO's buffer) takes the overflow. When the outbox closes, the connection
    /// closes itself (`SubscriberHandler`); this task just stops.
    private func write(to connection: SubscriberConnection, subscriber: Subscriber) async throws {
        /// The newest seq already sent; outbox events at or before it were in the backlog.
        var sentThrough: Int64?
        var carts: Set<String>?
        let fanout = hub.fanout(for: connection.eventLoop)
        var wire: WireWriter?
        while true {
            // History sent and the queue drained: hand over to the event loop's fan-out.
            if let sentThrough {
                if wire == nil { wire = try await WireWriter.make(for: connection.channel, onWritable: fanout.writabilityChanged).get() }
                if let wire, hub.goLive(subscriber) {
                    fanout.add(subscriber, wire: wire, carts: carts, after: sentThrough)
                    return
                }
            }
            switch await subscriber.outbox.next() {
            case .item(.start(let since, let startCarts)):
                carts = startCarts
                sentThrough = try await sendHistory(connection, carts: startCarts, since: since)
            case .item(.frame(let frame)):
                if let seq = frame.seq, let sent = sentThrough {
                    if seq <= sent { continue }
                    sentThrough = seq
                }
                try await connection.write(frame.text).get()
            case .closed:
                return
            }
        }
    }

    /// Sends the events after `since` from the log, or a snapshot; returns the seq sent through.
    private func sendHistory(_ connection: SubscriberConnection, carts: Set<String>?, since: Int64?) async throws -> Int64 {
        guard var after = since else {
            return try await sendSnapshot(connection, carts: carts, reason: .initial)
        }
        while true {
            let page: EventLogRead
            do {
                page = try await store.events(after: after, limit: 500, carts: carts)
            } catch let error as CartStoreError where error.code == .sinceAhead {
                return try await sendSnapshot(connection, carts: carts, reason: .sinceAhead)
            }
            switch page {
            case .tooOld:
                return try await sendSnapshot(connection, carts: carts, reason: .sinceTooOld)
            case .events(let events, let latest):
                for event in events {
                    try await connection.write(ServerEncoding.encode(.event(event))).get()
                }
                // A short page is the whole log as of the read; later events are in the outbox.
                guard events.count == 500, let last = events.last else { return max(events.last?.seq ?? after, latest) }
                after = last.seq
            }
        }
    }

    private func sendSnapshot(_ connection: SubscriberConnection, carts: Set<String>?, reason: SnapshotReason) async throws -> Int64 {
        let snapshot = try await store.snapshot(of: carts)
        let message = ServerMessage.snapshot(carts: snapshot.carts, seq: snapshot.seq, reason: reason)
        try await connection.write(ServerEncoding.encode(message)).get()
        return snapshot.seq
    }

    // MARK: Helpers

    static func textFrame(_ buffer: ByteBuffer) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: .text, data: buffer)
    }

    static func newID() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? DecodingError {
            return ErrorMiddleware<BasicRequestContext>.describe(error)
        }
        return "invalid JSON"
    }
}

extension Logger {
    func withSubscriber(_ id: String) -> Logger {
        var logger = self
        logger[metadataKey: "fanout.subscriber.id"] = "\(id)"
        return logger
    }
}

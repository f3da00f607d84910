import CartStore
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket

/// `/subscribe`: the WebSocket through which remote subscribers follow the event log.
///
/// Per connection the reader (client messages: every one renews the lease) runs in the
/// handler's task; a writer task sends the welcome's follow-up, the snapshot or backlog and
/// what queued meanwhile, then hands the connection to the hub and ends. See docs/PROTOCOL.md.
struct SubscribeController: Sendable {
    let store: CartStore
    let hub: FanoutHub
    let configuration: ServerConfiguration
    let access: AccessPolicy

    func addRoutes(to router: Router<SubscriberRequestContext>) {
        router.ws("/subscribe") { request, context in
            try access.check(request, requiresToken: true)
            guard !hub.isShuttingDown else {
                throw APIError(.serviceUnavailable, code: "shutting_down", "the server is shutting down")
            }
            guard hub.subscriberCount < configuration.maxSubscribers else {
                throw APIError(.serviceUnavailable, code: "server_full", "the server has its maximum of \(configuration.maxSubscribers) subscribers")
            }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            try await handle(inbound: inbound, outbound: outbound, channel: context.requestContext.channel, logger: context.logger)
        }
    }

    func handle(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, channel: any Channel, logger: Logger) async throws {
        guard let subscriber = try await open(outbound: outbound, channel: channel) else { return }
        defer { hub.disconnect(subscriber) }
        logger.debug("subscriber connected", metadata: ["fanout.subscriber.id": "\(subscriber.id)"])

        // The reader runs in this task; the writer in a task of its own that ends once the
        // subscriber is live (or its outbox closes, which the reader does on the way out).
        // Not a task group: an idle connection keeps the deepest async stack its task ever
        // reached (the task allocator frees its slabs only when the task ends), and the group
        // and its body were two more frames on it, about 2 KiB a subscriber.
        Task {
            // The logger with the subscriber's id is a metadata dictionary of its own: made here,
            // it lives as long as the writer, not as long as the connection.
            let logger = logger.withSubscriber(subscriber.id)
            do {
                try await write(outbound, channel: channel, subscriber: subscriber, logger: logger)
            } catch {
                logger.debug("subscriber writer ended", metadata: ["error": "\(error)"])
            }
        }
        defer { subscriber.outbox.close(.connectionEnded) }
        try await read(inbound, outbound: outbound, subscriber: subscriber)
    }

    /// Registers the connection with the hub and sends the welcome; nil if the hub refused it
    /// (and the connection was closed with the reason).
    private func open(outbound: WebSocketOutboundWriter, channel: any Channel) async throws -> Subscriber? {
        // Live frames are written by the event loop's fan-out, which skips a connection while
        // more than this many bytes wait unsent in it (and drops it once it falls out of the
        // ring): bounded memory per connection however slowly its client reads.
        try await channel.setOption(ChannelOptions.writeBufferWaterMark, value: .init(low: 16 * 1024, high: 64 * 1024)).get()
        let subscriber = Subscriber(id: Self.newID(), outboxLimit: configuration.outboxLimit)
        do {
            try hub.connect(subscriber, maxConnections: configuration.maxSubscribers)
        } catch {
            let (code, reason) = error == .full
                ? (WebSocketErrorCode(codeNumber: Int(FanoutCloseCode.serverFull.rawValue)), "server full")
                : (WebSocketErrorCode.goingAway, "server shutting down")
            try await outbound.close(code, reason: reason)
            return nil
        }
        let welcome = ServerMessage.welcome(.init(
            subscriberID: subscriber.id,
            heartbeatInterval: configuration.heartbeatInterval.seconds,
            leaseTTL: configuration.leaseTTL.seconds,
            latestSeq: hub.latestSeq))
        // Straight to the channel, like everything that follows it: one path keeps the order.
        do {
            try await channel.writeAndFlush(Self.textFrame(ServerEncoding.encode(welcome))).get()
        } catch {
            hub.disconnect(subscriber)
            throw error
        }
        return subscriber
    }

    // MARK: Reader

    private func read(_ inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, subscriber: Subscriber) async throws {
        // Returning ends the connection; the outbox closes on the way out (see `handle`).
        var subscribed = false
        // The inbound iterator itself, not `messages(maxSize:)`: one async frame less.
        var messages = inbound.makeAsyncIterator()
        do {
            while let message = try await messages.nextMessage(maxSize: configuration.maxMessageSize) {
                subscriber.heard()
                guard case .text(let text) = message else {
                    try await sendError(outbound, code: "binary_not_supported", "send JSON text frames, not binary")
                    try await outbound.close(.policyViolation, reason: "binary frames are not supported")
                    return
                }
                let clientMessage: ClientMessage
                do {
                    clientMessage = try FanoutJSON.decoder().decode(ClientMessage.self, from: Data(text.utf8))
                } catch {
                    try await sendError(outbound, code: "bad_message", "expected {\"type\":\"subscribe\"|\"heartbeat\",…}: \(Self.describe(error))")
                    continue
                }
                switch clientMessage {
                case .heartbeat:
                    continue
                case .subscribe(let carts, let since):
                    if subscribed {
                        try await sendError(outbound, code: "already_subscribed", "this connection is already subscribed; open another to change the carts")
                        continue
                    }
                    if let problem = validate(carts: carts, since: since) {
                        try await sendError(outbound, code: problem.code, problem.message)
                        continue
                    }
                    subscribed = true
                    hub.subscribe(subscriber, carts: carts.map(Set.init), since: since)
                }
            }
        } catch {
            // Too large, invalid UTF-8, protocol errors: say so, then let WebSocket close with
            // the matching code (1009, 1007, 1002).
            try? await sendError(outbound, code: "bad_frame", "the last frame broke the WebSocket rules or the \(configuration.maxMessageSize)-byte limit")
            throw error
        }
    }

    private func validate(carts: [String]?, since: Int64?) -> (code: String, message: String)? {
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

    private func sendError(_ outbound: WebSocketOutboundWriter, code: String, _ message: String) async throws {
        try await outbound.write(.custom(Self.textFrame(ServerEncoding.encode(.error(code: code, message: message)))))
    }

    // MARK: Writer

    /// Sends the snapshot or backlog, then what queued meanwhile, then goes live: from then on
    /// the hub writes frames to the channel itself and this task only waits for the close.
    ///
    /// Until live, every write is awaited, so a slow client paces this task and the bounded
    /// outbox (not NIO's buffer) takes the overflow.
    private func write(_ outbound: WebSocketOutboundWriter, channel: any Channel, subscriber: Subscriber, logger: Logger) async throws {
        /// The newest seq already sent; outbox events at or before it were in the backlog.
        var sentThrough: Int64?
        var carts: Set<String>?
        let fanout = hub.fanout(for: channel.eventLoop)
        var wire: WireWriter?
        while true {
            // History sent and the queue drained: hand over to the event loop's fan-out, and
            // let a later close start its own short task.
            if let sentThrough {
                if wire == nil { wire = try await WireWriter.make(for: channel, onWritable: fanout.writabilityChanged).get() }
                if let wire, subscriber.outbox.goLive(onClose: { reason in
                    fanout.remove(subscriber)
                    Task { try? await Self.close(outbound, for: reason) }
                }) {
                    fanout.add(subscriber, wire: wire, carts: carts, after: sentThrough)
                    return
                }
            }
            switch await subscriber.outbox.next() {
            case .item(.start(let since, let startCarts)):
                carts = startCarts
                sentThrough = try await sendHistory(channel, carts: startCarts, since: since)
            case .item(.frame(let frame)):
                if let seq = frame.seq, let sent = sentThrough {
                    if seq <= sent { continue }
                    sentThrough = seq
                }
                try await channel.writeAndFlush(Self.textFrame(frame.text)).get()
            case .closed(let reason):
                try await Self.close(outbound, for: reason)
                return
            }
        }
    }

    /// Closes the WebSocket with the code documented for `reason`.
    static func close(_ outbound: WebSocketOutboundWriter, for reason: CloseReason) async throws {
        switch reason {
        case .leaseExpired:
            try await outbound.close(.init(codeNumber: Int(FanoutCloseCode.leaseExpired.rawValue)), reason: "lease expired: heartbeat more often")
        case .tooSlow:
            try await outbound.close(.init(codeNumber: Int(FanoutCloseCode.tooSlow.rawValue)), reason: "too slow: reconnect and resume with since")
        case .shuttingDown:
            try await outbound.close(.goingAway, reason: "server shutting down")
        case .connectionEnded:
            break
        }
    }

    /// Sends the events after `since` from the log, or a snapshot; returns the seq sent through.
    private func sendHistory(_ channel: any Channel, carts: Set<String>?, since: Int64?) async throws -> Int64 {
        guard var after = since else {
            return try await sendSnapshot(channel, carts: carts, reason: .initial)
        }
        while true {
            let page: EventLogRead
            do {
                page = try await store.events(after: after, limit: 500, carts: carts)
            } catch let error as CartStoreError where error.code == .sinceAhead {
                return try await sendSnapshot(channel, carts: carts, reason: .sinceAhead)
            }
            switch page {
            case .tooOld:
                return try await sendSnapshot(channel, carts: carts, reason: .sinceTooOld)
            case .events(let events, let latest):
                for event in events {
                    try await channel.writeAndFlush(Self.textFrame(ServerEncoding.encode(.event(event)))).get()
                }
                // A short page is the whole log as of the read; later events are in the outbox.
                guard events.count == 500, let last = events.last else { return max(events.last?.seq ?? after, latest) }
                after = last.seq
            }
        }
    }

    private func sendSnapshot(_ channel: any Channel, carts: Set<String>?, reason: SnapshotReason) async throws -> Int64 {
        let snapshot = try await store.snapshot(of: carts)
        let message = ServerMessage.snapshot(carts: snapshot.carts, seq: snapshot.seq, reason: reason)
        try await channel.writeAndFlush(Self.textFrame(ServerEncoding.encode(message))).get()
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

/// The WebSocket router's request context: the basic one, plus the connection's channel, which
/// the hub writes live frames to.
struct SubscriberRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<Self>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        webSocket = .init()
        channel = source.channel
    }
}

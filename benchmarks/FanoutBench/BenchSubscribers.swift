import FanoutProtocol
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization

/// One receipt: which seq, when (nanoseconds on the bench's clock).
struct Receipt: Sendable {
    var seq: Int64
    var at: ContinuousClock.Instant
}

/// The bench's subscribers: connected a window at a time, each recording its receipts.
///
/// Receiving is most of what the bench does (one receipt per subscriber per write), on the
/// cores the measured server also runs on, so it is kept as cheap as it can be, the same for
/// both peers: plain SwiftNIO channels, each frame handled on its channel's event loop as
/// soon as it is decoded (timestamp, seq scanned from the payload's bytes, receipt appended
/// to an array only that loop touches). No task, no `String` and no lock per message; the
/// arrays are read on their loops when the run is over.
final class SubscriberFleet: Sendable {
    /// The subscribers of one event loop, only ever touched on that loop.
    private struct Shard: Sendable {
        let loop: any EventLoop
        let handlers: NIOLoopBoundBox<[any BenchReceiver]>

        init(loop: any EventLoop) {
            self.loop = loop
            self.handlers = .makeBoxSendingValue([], eventLoop: loop)
        }
    }

    /// One connection attempt, counted once: as ready or as failed, whichever comes first.
    private final class Attempt: Sendable {
        private let settled = Atomic<Bool>(false)

        /// True the first time only.
        func settle() -> Bool {
            !settled.exchange(true, ordering: .relaxed)
        }
    }

    /// Largest frame accepted; a fanout snapshot can be big, deliveries are small.
    static let maxFrameSize = 1 << 20
    /// Largest frame accepted from NATS, which puts all it has queued for a connection in one
    /// frame: up to its `max_pending` (64 MiB by default) when a subscriber falls behind.
    static let maxNATSFrameSize = 64 << 20

    let target: BenchTarget
    private let group: any EventLoopGroup
    private let shards: [Shard]
    private let readyCount = Atomic<Int>(0)
    private let failed = Atomic<Int>(0)

    /// - Parameter threads: event loops receiving for the subscribers (see `defaultThreads`).
    init(target: BenchTarget, threads: Int = SubscriberFleet.defaultThreads) {
        self.target = target
        // Never shut down: the bench exits with its sockets open (see `FanoutBench.run`).
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, threads))
        self.group = group
        self.shards = group.makeIterator().map(Shard.init(loop:))
    }

    /// Half the cores: the server under test runs on the same machine and needs the rest.
    /// One loop per core does not receive more (the server is then short of CPU), and each
    /// loop finds fewer frames per wake-up, so every frame costs more: on 2 cores with 1 000
    /// subscribers, 2 loops took about 1.4 times the CPU per delivery that 1 loop took.
    static var defaultThreads: Int { max(1, System.coreCount / 2) }

    var connectedCount: Int { readyCount.load(ordering: .relaxed) }

    /// Opens `count` subscribers, at most 200 handshakes in flight, and waits until all are
    /// subscribed (or have failed).
    func connect(count: Int) async throws {
        guard count > 0 else { return }
        let endpoints = try target.baseURLs.indices.map { try Endpoint(target, server: $0) }
        for index in 0..<count {
            open(endpoints[index % endpoints.count], index: index)
            if index % 100 == 99 {
                while readyCount.load(ordering: .relaxed) + failed.load(ordering: .relaxed) < index - 200 {
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while readyCount.load(ordering: .relaxed) + failed.load(ordering: .relaxed) < count, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        if failed.load(ordering: .relaxed) > 0 {
            FileHandle.standardError.write(Data("bench: \(failed.load(ordering: .relaxed)) subscribers failed to connect\n".utf8))
        }
    }

    /// Starts subscriber `index`'s connection; its outcome arrives through `settle`.
    private func open(_ endpoint: Endpoint, index: Int) {
        let attempt = Attempt()
        let settle: @Sendable (_ ready: Bool) -> Void = { [self] ready in
            guard attempt.settle() else { return }
            if ready {
                readyCount.add(1, ordering: .relaxed)
            } else {
                failed.add(1, ordering: .relaxed)
            }
        }
        let bootstrap = ClientBootstrap(group: group)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    if target.transport == .sse {
                        // A stream: the handler sends the request and settles on its first event.
                        let handler = BenchEventStreamHandler(peer: target.peer, request: endpoint.streamRequest, settle: settle)
                        try channel.pipeline.syncOperations.addHandler(handler)
                        try self.shard(of: channel).handlers.value.append(handler)
                        return
                    }
                    try self.configureUpgrade(of: channel, endpoint: endpoint, index: index, settle: settle).whenComplete { result in
                        // Upgraded: the handler settles (fanout: on the welcome). Refused or failed: over.
                        if case .success(true) = result { return }
                        settle(false)
                        channel.close(promise: nil)
                    }
                }
            }
        let connected =
            if let address = endpoint.address {
                bootstrap.connect(to: address)
            } else {
                bootstrap.connect(host: endpoint.host, port: endpoint.port)
            }
        connected.whenFailure { _ in settle(false) }
    }

    /// HTTP/1.1 with the WebSocket upgrade, then (upgraded) the frame codec and a
    /// `BenchSubscriberHandler`, registered with its loop's shard. The future tells whether
    /// the server upgraded.
    private func configureUpgrade(
        of channel: any Channel, endpoint: Endpoint, index: Int, settle: @escaping @Sendable (_ ready: Bool) -> Void
    ) throws -> EventLoopFuture<Bool> {
        let peer = target.peer
        let presence = target.presence
        let key = "m\(index)"
        let shard = try shard(of: channel)
        let maxFrameSize = peer == .nats ? Self.maxNATSFrameSize : Self.maxFrameSize
        let upgrader = NIOTypedWebSocketClientUpgrader<Bool>(maxFrameSize: maxFrameSize) { channel, _ in
            channel.eventLoop.makeCompletedFuture {
                let handler = BenchSubscriberHandler(peer: peer, presence: presence, key: key, settle: settle)
                try channel.pipeline.syncOperations.addHandler(handler)
                shard.handlers.value.append(handler)
                return true
            }
        }
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
            upgradeConfiguration: NIOTypedHTTPClientUpgradeConfiguration(
                upgradeRequestHead: endpoint.requestHead, upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in channel.eventLoop.makeSucceededFuture(false) }))
        // fanout-server may send its welcome in the same read as its 101 response.
        configuration.leftOverBytesStrategy = .forwardBytes
        return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: configuration)
    }

    private func shard(of channel: any Channel) throws -> Shard {
        guard let shard = shards.first(where: { $0.loop === channel.eventLoop }) else {
            throw BenchFailure("a channel on an event loop outside the fleet's group")
        }
        return shard
    }

    /// Waits until every subscriber has received every seq in `expected`, or `timeout` passes.
    func waitForDeliveries(of expected: Set<Int64>, timeout: Duration) async {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await !isAnySubscriberBehind(expected.count) { return }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Whether a subscriber that got ready has fewer than `count` receipts, asked on each loop.
    private func isAnySubscriberBehind(_ count: Int) async -> Bool {
        for shard in shards {
            let behind = try? await shard.loop.submit {
                shard.handlers.value.contains { $0.isReady && $0.receipts.count < count }
            }.get()
            if behind ?? false { return true }
        }
        return false
    }

    /// Waits until `done` holds for the presence tallies of the subscribers that got ready, or
    /// `timeout` passes; tells which. The tallies are read on their loops every 20 ms.
    func waitForPresence(timeout: Duration, until done: @escaping @Sendable ([PresenceTally]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if done(await presenceTallies()) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// The presence tally of each subscriber that got ready, collected on their loops.
    func presenceTallies() async -> [PresenceTally] {
        var all: [PresenceTally] = []
        for shard in shards {
            all +=
                (try? await shard.loop.submit {
                    shard.handlers.value.filter(\.isReady).map(\.presence)
                }.get()) ?? []
        }
        return all
    }

    /// Has every ready subscriber change its presence state `rate` times a second (its first
    /// change at a random moment of the first period, so the changes spread), for `duration`;
    /// returns when they stop. Refusals come back as `error` messages (`PresenceTally.errors`).
    func changePresence(rate: Double, for duration: Duration) async {
        let period = TimeAmount.nanoseconds(Int64(1e9 / rate))
        var tasks: [RepeatedTask] = []
        for shard in shards {
            tasks +=
                (try? await shard.loop.submit {
                    shard.handlers.value.filter(\.isReady).enumerated().map { index, handler in
                        let handler = NIOLoopBound(handler, eventLoop: shard.loop)
                        return shard.loop.scheduleRepeatedTask(
                            initialDelay: .nanoseconds(Int64.random(in: 0..<period.nanoseconds)), delay: period
                        ) { _ in
                            // A state of its own each time: the time it is sent.
                            let at = NIODeadline.now().uptimeNanoseconds
                            handler.value.send(#"{"type":"presence","state":{"at":\#(at),"n":\#(index)}}"#)
                        }
                    }
                }.get()) ?? []
        }
        try? await Task.sleep(for: duration)
        for task in tasks { task.cancel() }
    }

    /// Has every subscriber close its WebSocket (a close frame; the server closes the
    /// connection), all at once, in the order they were opened on each loop.
    func closeAll() async {
        for shard in shards {
            try? await shard.loop.submit {
                for handler in shard.handlers.value { handler.close() }
            }.get()
        }
    }

    /// Receipts of each subscriber that was connected, collected on their loops.
    func receipts() async -> [[Receipt]] {
        var all: [[Receipt]] = []
        for shard in shards {
            all +=
                (try? await shard.loop.submit {
                    shard.handlers.value.filter(\.isReady).map(\.receipts)
                }.get()) ?? []
        }
        return all
    }
}

/// Where the subscribers connect and the upgrade request they send, worked out once.
private struct Endpoint: Sendable {
    let host: String
    let port: Int
    /// The host as an IP address; a name is resolved at each connection instead.
    let address: SocketAddress?
    let requestHead: HTTPRequestHead
    /// The same request asking for an event stream, as bytes.
    let streamRequest: ByteBuffer

    init(_ target: BenchTarget, server: Int) throws {
        let url = target.subscribeURL(server)
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            throw BenchFailure("bad subscribe URL \(url)")
        }
        guard components.scheme == "ws" else {
            throw BenchFailure("subscribers speak plain ws:// only (got \(url))")
        }
        self.host = host
        port = components.port ?? 80
        address = try? SocketAddress(ipAddress: host, port: port)
        let hostHeader = host.contains(":") ? "[\(host)]" : host
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: components.port == nil ? hostHeader : "\(hostHeader):\(port)")
        if let token = target.subscriberToken { headers.add(name: "Authorization", value: "Bearer \(token)") }
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        let uri = components.percentEncodedQuery.map { "\(path)?\($0)" } ?? path
        requestHead = HTTPRequestHead(version: .http1_1, method: .GET, uri: uri, headers: headers)
        var stream = "GET \(uri) HTTP/1.1\r\nAccept: text/event-stream\r\n"
        for header in headers { stream += "\(header.name): \(header.value)\r\n" }
        streamRequest = ByteBuffer(string: stream + "\r\n")
    }
}

/// One bench subscriber's WebSocket, once upgraded: records deliveries as they are decoded,
/// subscribes and heartbeats (fanout) or subscribes and answers PING (NATS), answers pings and
/// closes.
///
/// Lives on its channel's event loop, like everything it owns.
final class BenchSubscriberHandler: ChannelInboundHandler, RemovableChannelHandler, BenchReceiver {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// A fragmented message being received.
    private enum Fragments {
        case none
        case text(ByteBuffer)
        case binary
    }

    /// This subscriber's deliveries, in arrival order.
    private(set) var receipts: [Receipt] = []
    /// With `--presence-cart`: its presence messages, counted as they arrive.
    private(set) var presence = PresenceTally()
    /// Subscribed: for fanout, once the subscribe message has gone; for nchan, once upgraded;
    /// for NATS, once the PONG after its SUB has come back.
    private(set) var isReady = false

    private let peer: FanoutBench.Peer
    /// With `--presence-cart`: the cart it subscribes to instead of all carts, and `key` its
    /// presence key when present.
    private let presenceSubscription: PresenceSubscription?
    private let key: String
    /// Reports the connection's outcome to the fleet (only the first call counts).
    private let settle: @Sendable (_ ready: Bool) -> Void
    private var channel: (any Channel)?
    private var heartbeats: RepeatedTask?
    private var fragments = Fragments.none
    private var closeSent = false
    /// NATS frames carry a byte stream: an operation may span frames, a frame hold several.
    private var natsReader = NATSReader()
    private var natsSubscribed = false

    init(
        peer: FanoutBench.Peer, presence: PresenceSubscription? = nil, key: String = "",
        settle: @escaping @Sendable (_ ready: Bool) -> Void
    ) {
        self.peer = peer
        self.presenceSubscription = presence
        self.key = key
        self.settle = settle
    }

    func handlerAdded(context: ChannelHandlerContext) {
        channel = context.channel
        // nchan has nothing to negotiate: connected is subscribed.
        if peer == .nchan { becomeReady() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = ContinuousClock.now
        let frame = unwrapInboundIn(data)
        if peer == .nats, !frame.opcode.isControlOpcode {
            readNATS(frame.unmaskedData, at: now, context: context)
            return
        }
        switch frame.opcode {
        case .text:
            if frame.fin {
                received(frame.unmaskedData, at: now, context: context)
            } else {
                fragments = .text(frame.unmaskedData)
            }
        case .binary:
            fragments = frame.fin ? .none : .binary
        case .continuation:
            guard case .text(var message) = fragments else {
                if frame.fin { fragments = .none }
                return
            }
            fragments = .none
            var part = frame.unmaskedData
            message.writeBuffer(&part)
            if frame.fin {
                received(message, at: now, context: context)
            } else {
                fragments = .text(message)
            }
        case .ping:
            context.writeAndFlush(wrapOutboundOut(Self.frame(.pong, frame.unmaskedData)), promise: nil)
        case .connectionClose:
            answerClose(frame.unmaskedData, context: context)
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        heartbeats?.cancel()
        heartbeats = nil
        presence.isClosed = true
        if !isReady { settle(false) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    /// Closes its WebSocket: a close frame (1000); the server answers and closes the connection.
    func close() {
        guard !closeSent, let channel else { return }
        closeSent = true
        heartbeats?.cancel()
        heartbeats = nil
        channel.writeAndFlush(Self.frame(.connectionClose, ByteBuffer(bytes: [0x03, 0xE8])), promise: nil)
    }

    /// A complete text message: a delivery to record, or fanout's welcome to answer.
    private func received(_ payload: ByteBuffer, at now: ContinuousClock.Instant, context: ChannelHandlerContext) {
        if presenceSubscription != nil, payload.withUnsafeReadableBytes({ presence.count($0) }) { return }
        let seq = payload.withUnsafeReadableBytes { bytes in
            BenchTarget.isDelivery(bytes, from: peer) ? BenchTarget.seq(in: bytes) : nil
        }
        if let seq {
            receipts.append(Receipt(seq: seq, at: now))
        } else if peer == .fanout, !isReady,
            payload.withUnsafeReadableBytes({ BenchTarget.contains(BenchTarget.welcomeType, in: $0) })
        {
            answerWelcome(payload, context: context)
        }
    }

    /// NATS: records each MSG's seq; answers INFO with CONNECT, SUB and a PING (ready on its
    /// PONG), and the server's PING with PONG.
    private func readNATS(_ data: ByteBuffer, at now: ContinuousClock.Instant, context: ChannelHandlerContext) {
        var replies = ""
        var failed = false
        do {
            try data.withUnsafeReadableBytes { bytes in
                try natsReader.read(bytes) { operation in
                    switch operation {
                    case .message(let payload):
                        if let seq = BenchTarget.seq(in: payload) { receipts.append(Receipt(seq: seq, at: now)) }
                    case .info where !natsSubscribed:
                        natsSubscribed = true
                        replies += NATS.subscribe
                    case .ping:
                        replies += NATS.pong
                    case .pong:
                        becomeReady()
                    case .error:
                        failed = true
                    case .info, .ok:
                        break
                    }
                }
            }
        } catch {
            failed = true
        }
        if !replies.isEmpty {
            context.writeAndFlush(wrapOutboundOut(Self.frame(.binary, ByteBuffer(string: replies))), promise: nil)
        }
        if failed { context.close(promise: nil) }
    }

    /// Subscribes after the welcome's latest seq (live events only), then heartbeats at the
    /// interval it announced, so that runs longer than the lease keep their subscribers.
    private func answerWelcome(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        guard let message = try? FanoutJSON.decoder().decode(ServerMessage.self, from: Data(payload.readableBytesView)),
            case .welcome(let welcome) = message,
            let subscribe = try? subscribeMessage(after: welcome.latestSeq).jsonText(),
            let heartbeat = try? ClientMessage.heartbeat.jsonText()
        else {
            context.close(promise: nil)
            return
        }
        context.writeAndFlush(wrapOutboundOut(Self.frame(.text, ByteBuffer(string: subscribe))), promise: nil)
        let interval = TimeAmount(welcome.clientHeartbeatInterval)
        let heartbeatPayload = ByteBuffer(string: heartbeat)
        let channel = context.channel
        heartbeats = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            channel.writeAndFlush(Self.frame(.text, heartbeatPayload), promise: nil)
        }
        becomeReady()
    }

    /// All carts after `latestSeq` (live events only); with `--presence-cart`, that cart from a
    /// snapshot (its last part says the subscription is complete), present under `key` or not.
    private func subscribeMessage(after latestSeq: Int64) -> ClientMessage {
        guard let presenceSubscription else { return .subscribe(carts: nil, since: latestSeq) }
        return .subscribe(
            carts: [presenceSubscription.cart], since: nil,
            presence: presenceSubscription.isPresent ? PresenceRequest(key: key) : nil)
    }

    /// Echoes the server's close (its status code only, RFC 6455 §5.5.1), then closes.
    private func answerClose(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        guard !closeSent else { return }
        closeSent = true
        var payload = payload
        let code = payload.readSlice(length: min(2, payload.readableBytes)) ?? ByteBuffer()
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(Self.frame(.connectionClose, code))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    private func becomeReady() {
        guard !isReady else { return }
        isReady = true
        settle(true)
    }

    /// Sends `text` as a message, on its loop.
    func send(_ text: String) {
        guard let channel, !closeSent else { return }
        channel.writeAndFlush(Self.frame(.text, ByteBuffer(string: text)), promise: nil)
    }

    /// A final frame from a client: masked, as RFC 6455 requires (the encoder applies the key).
    private static func frame(_ opcode: WebSocketOpcode, _ data: ByteBuffer) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: data)
    }
}

/// What the fleet reads of each subscriber, on its loop, when the run is over.
protocol BenchReceiver: AnyObject {
    var receipts: [Receipt] { get }
    var isReady: Bool { get }
    /// Presence messages received (WebSocket subscribers with `--presence-cart` only).
    var presence: PresenceTally { get }
    func close()
    /// Sends `text` as a message (fanout's WebSocket subscribers only).
    func send(_ text: String)
}

extension BenchReceiver {
    var presence: PresenceTally { PresenceTally() }
    func close() {}
    func send(_ text: String) {}
}

/// One bench subscriber as an event stream (`Accept: text/event-stream`): sends the request,
/// skips the response head, and records each event's seq from its `data:` line as it arrives.
/// Ready on fanout's complete snapshot, or on nchan's response head (subscribed as soon as
/// answered), so writes start only once every stream is subscribed. Each byte is looked at once: lines are cut
/// as they complete, and only a `data:` line, or a line split across reads, is copied.
final class BenchEventStreamHandler: ChannelInboundHandler, BenchReceiver {
    typealias InboundIn = ByteBuffer

    private static let headEnd = Array("\r\n\r\n".utf8)
    private static let ok = Array("HTTP/1.1 200".utf8)
    private static let dataField = Array("data: ".utf8)

    private(set) var receipts: [Receipt] = []
    private(set) var isReady = false

    private let peer: FanoutBench.Peer
    private let request: ByteBuffer
    private let settle: @Sendable (_ ready: Bool) -> Void
    /// The response head until it is complete, then the start of a line split across reads.
    private var partial: [UInt8] = []
    private var headRead = false
    /// The current event's `data:` line, once seen.
    private var dataLine: [UInt8] = []

    init(peer: FanoutBench.Peer, request: ByteBuffer, settle: @escaping @Sendable (_ ready: Bool) -> Void) {
        self.peer = peer
        self.request = request
        self.settle = settle
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(request), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let now = ContinuousClock.now
        var buffer = unwrapInboundIn(data)
        if !headRead {
            partial += buffer.readableBytesView
            guard let end = partial.firstRange(of: Self.headEnd) else { return }
            guard partial.starts(with: Self.ok) else {
                settle(false)
                context.close(promise: nil)
                return
            }
            headRead = true
            buffer = ByteBuffer(bytes: partial[end.upperBound...])
            partial.removeAll()
            if peer == .nchan { becomeReady() }
        }
        buffer.withUnsafeReadableBytes { bytes in
            var lineStart = 0
            for index in bytes.indices where bytes[index] == UInt8(ascii: "\n") {
                if partial.isEmpty {
                    line(UnsafeRawBufferPointer(rebasing: bytes[lineStart..<index]), at: now)
                } else {
                    partial += bytes[lineStart..<index]
                    let whole = partial
                    partial.removeAll(keepingCapacity: true)
                    whole.withUnsafeBytes { line($0, at: now) }
                }
                lineStart = index + 1
            }
            partial += bytes[lineStart...]
        }
    }

    /// One line of the stream, without its newline: an empty one ends an event.
    private func line(_ line: UnsafeRawBufferPointer, at now: ContinuousClock.Instant) {
        if line.isEmpty || (line.count == 1 && line[0] == UInt8(ascii: "\r")) {
            guard !dataLine.isEmpty else { return }
            // fanout: subscribed once its snapshot is complete (events after it follow); a write
            // committed before that is in the snapshot, not an event, and would count as lost.
            if peer == .nchan || BenchTarget.isLastSnapshotPart(dataLine) { becomeReady() }
            if BenchTarget.isDelivery(dataLine, from: peer), let seq = BenchTarget.seq(in: dataLine) {
                receipts.append(Receipt(seq: seq, at: now))
            }
            dataLine.removeAll(keepingCapacity: true)
        } else if line.starts(with: Self.dataField) {
            dataLine.append(contentsOf: line.dropFirst(Self.dataField.count))
        }
    }

    private func becomeReady() {
        guard !isReady else { return }
        isReady = true
        settle(true)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !isReady { settle(false) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

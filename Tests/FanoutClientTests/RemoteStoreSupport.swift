import CartStore
import Dispatch
import FanoutClient
import FanoutProtocol
import FanoutServer
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A fanout server on a temporary database, restartable on the same port: run in the test
/// process (`InProcessServer`, the real server with `fanout-server`'s flags), or, for a test
/// whose subject needs a process of its own (a server frozen by SIGSTOP, or killed by SIGKILL
/// mid-write), as a `fanout-server` process.
final class ServerUnderTest: @unchecked Sendable {  // `current` is behind its lock; ServerProcess is not Sendable.
    /// Where the server runs.
    enum Kind {
        /// In the test process: started and stopped in milliseconds, its log kept in memory.
        case inProcess
        /// A `fanout-server` process of its own: for `freeze()` and `crash()`.
        case process
    }

    private enum Running {
        case inProcess(InProcessServer)
        case process(ServerProcess)
        case stopped
    }

    let kind: Kind
    let database: String
    let cleanup: @Sendable () -> Void
    let extra: [String]
    /// `--heartbeat-interval` and `--lease-ttl`, the same on every start.
    let timing: [String]
    private let current: NIOLockedValueBox<Running>
    /// The log of the in-process server, over its restarts.
    private let logLines = RecentLogLines()
    let port: Int

    /// A server with `extra` arguments, heartbeating every `heartbeatInterval` seconds.
    init(_ extra: [String] = [], heartbeatInterval: Double = 0.2, leaseTTL: Double = 2, kind: Kind = .inProcess) async throws {
        (database, cleanup) = try Mutations.temporaryDatabase()
        self.kind = kind
        self.extra = extra
        timing = ["--heartbeat-interval", "\(heartbeatInterval)", "--lease-ttl", "\(leaseTTL)"]
        current = NIOLockedValueBox(.stopped)
        port = try await Self.launch(kind, ["--port", "0", "--db", database] + timing + extra, into: current, logging: logLines)
    }

    private static func launch(
        _ kind: Kind, _ arguments: [String], into current: NIOLockedValueBox<Running>, logging: RecentLogLines
    ) async throws -> Int {
        switch kind {
        case .inProcess:
            let server = try await InProcessServer(
                arguments: arguments, logger: logging.logger(), eventLoopGroup: .shared(inProcessServerLoops))
            current.withLockedValue { $0 = .inProcess(server) }
            return server.port
        case .process:
            let server = try await ServerProcess(arguments: arguments)
            current.withLockedValue { $0 = .process(server) }
            return server.port
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// The server's `--token`, if it was given one.
    var operatorToken: String? {
        extra.firstIndex(of: "--token").flatMap { extra.indices.contains($0 + 1) ? extra[$0 + 1] : nil }
    }

    /// The last lines the server logged.
    var logTail: String {
        switch current.withLockedValue({ $0 }) {
        case .process(let process): tail(process.standardError)
        case .inProcess, .stopped: tail(logLines.text)
        }
    }

    /// Stops the server as SIGTERM does (subscribers end with 1001, requests in flight finish)
    /// and returns once it has: true if it stopped cleanly (exit status 0).
    @discardableResult
    func halt() async -> Bool {
        switch current.withLockedValue({ running in
            defer { running = .stopped }
            return running
        }) {
        case .inProcess(let server):
            do {
                try await server.stop()
                return true
            } catch {
                Issue.record("the server stopped with \(error)")
                return false
            }
        case .process(let process):
            process.signal(SIGTERM)
            return await process.waitForExit() == 0
        case .stopped:
            return true
        }
    }

    /// Kills the server process mid-work (SIGKILL): no close frame, no answer to what is in flight.
    func crash() async {
        guard
            case .process(let process) = current.withLockedValue({ running in
                defer { running = .stopped }
                return running
            })
        else {
            preconditionFailure("a crash needs a server process: ServerUnderTest(kind: .process)")
        }
        process.signal(SIGKILL)
        _ = await process.waitForExit()
    }

    /// Freezes the server process (SIGSTOP): it accepts connections and answers nothing until
    /// `thaw()`.
    func freeze() { signalProcess(SIGSTOP) }

    /// Lets a frozen server process go on (SIGCONT).
    func thaw() { signalProcess(SIGCONT) }

    private func signalProcess(_ signal: Int32) {
        guard case .process(let process) = current.withLockedValue({ $0 }) else {
            preconditionFailure("freezing needs a server process: ServerUnderTest(kind: .process)")
        }
        process.signal(signal)
    }

    /// Stops the server as SIGTERM does and starts it again on the same port, on `database`
    /// (another one: a server that lost its data).
    func restart(database: String? = nil) async throws {
        await halt()
        try await start(database: database)
    }

    /// Stops the server, writes `count` lines to `cart` straight into its database and prunes
    /// all but the last `keeping` events, then starts it again on the same port: a log pruned
    /// past what a client holds.
    func pruneWhileDown(_ cart: String, writing count: Int, keeping: Int) async throws {
        await halt()
        let direct = try CartStore(path: database)
        for index in 0..<count { _ = try await direct.addItem(cartID: cart, sku: "s\(index)", quantity: 1, unitPriceCents: 1) }
        _ = try await direct.pruneEvents(keepingLast: keeping)
        try direct.close()
        try await start()
    }

    func stop() async {
        await halt()
        cleanup()
    }

    /// Starts the server again on the same port, on its database (or `database`), after
    /// `halt()` or `crash()`.
    func start(database: String? = nil) async throws {
        _ = try await Self.launch(
            kind, ["--port", "\(port)", "--db", database ?? self.database] + timing + extra, into: current, logging: logLines)
    }

    /// Every event in the log, through `GET /events`.
    func log() async throws -> [CartEvent] {
        var events: [CartEvent] = []
        while true {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/events?since=\(events.last?.seq ?? 0)&limit=1000")!)
            if let token = operatorToken { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
            let (data, _) = try await URLSession.shared.data(for: request)
            let page = try FanoutJSON.decoder().decode(EventsPage.self, from: data)
            if page.events.isEmpty { return events }
            events += page.events
        }
    }

    /// The server's carts, by id (`GET /carts`).
    func carts() async throws -> [String: Cart] {
        let answer = try await CartServerAPI(baseURL: url).carts()
        return Dictionary(uniqueKeysWithValues: answer.carts.map { ($0.id, $0) })
    }

    /// `/stats` as the server answers it (its text), or nil without an answer within 2 s.
    func stats() async -> String? {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/stats")!)
        request.timeoutInterval = 2
        if let token = operatorToken { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        guard let (data, _) = try? await URLSession.shared.data(for: request) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// `/stats` `subscribers`: the subscribers connected now.
    func subscribers() async -> Int? {
        guard let (data, _) = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stats")!),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { return nil }
        return (object["subscribers"] as? NSNumber)?.intValue
    }

    /// Adds one line to `cart`; the event's seq on a 2xx.
    @discardableResult
    func add(_ cart: String, _ sku: String) async -> Int64? {
        await Mutations.add(port: port, cart: cart, sku: sku)
    }
}

/// `eventually`, saying when it runs out what the store was doing (its connection, loop,
/// observers' carts and pending writes: `debugDescription`) and what the server was (`/stats`
/// and the tail of its log).
@discardableResult
func eventually(
    timeout: Duration = .seconds(30), _ what: String, store: RemoteCartStore, server: ServerUnderTest?,
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () async throws -> Bool
) async rethrows -> Bool {
    try await eventually(
        timeout: timeout, what, explaining: { await explain(store: store, server: server) }, sourceLocation: sourceLocation, condition)
}

/// What a store and its server are doing now, for a failure message.
func explain(store: RemoteCartStore?, server: ServerUnderTest?) async -> String {
    var lines: [String] = []
    if let store { lines.append("store: \(store.debugDescription)") }
    if let server {
        lines.append("server /stats: \(await server.stats() ?? "(no answer)")")
        lines.append("server log, last lines:\n\(server.logTail)")
    }
    return lines.joined(separator: "\n")
}

/// An observer that records every callback, and whether each came on its queue.
final class Recorder: CartObserver {
    struct Record {
        var loaded: [Cart]?
        var loads = 0
        var events: [CartEvent] = []
        var resyncs: [(ResyncReason, [Cart])] = []
        var states: [RemoteCartStore.ConnectionState] = []
        var refusals: [(carts: [String], error: RemoteStoreError)] = []
        /// What `didChangePending` said to show, in order.
        var shown: [(pending: [PendingWrite], cart: Cart)] = []
        var rejections: [(write: PendingWrite, error: RemoteStoreError)] = []
        var offQueue = 0
        /// Callbacks after `stop`.
        var afterStop = 0
    }

    let record = NIOLockedValueBox(Record())
    let queue: DispatchQueue?
    private static let key = DispatchSpecificKey<ObjectIdentifier>()
    /// Called after each event is recorded (on the callback's thread).
    let onEvent: (@Sendable (Recorder, any CartSource, Int) -> Void)?
    let stopped = NIOLockedValueBox(false)

    init(queue: DispatchQueue? = nil, onEvent: (@Sendable (Recorder, any CartSource, Int) -> Void)? = nil) {
        self.queue = queue
        self.onEvent = onEvent
        if let queue { queue.setSpecific(key: Self.key, value: ObjectIdentifier(queue)) }
    }

    private func note(_ change: (inout Record) -> Void) {
        let onQueue = queue.map { DispatchQueue.getSpecific(key: Self.key) == ObjectIdentifier($0) } ?? true
        let stopped = stopped.withLockedValue { $0 }
        record.withLockedValue { record in
            change(&record)
            if !onQueue { record.offQueue += 1 }
            if stopped { record.afterStop += 1 }
        }
    }

    func cartSource(_ store: any CartSource, didLoad carts: [Cart]) {
        note {
            $0.loaded = carts
            $0.loads += 1
        }
    }

    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) {
        note { $0.events.append(event) }
        onEvent?(self, store, record.withLockedValue { $0.events.count })
    }

    func cartSource(_ store: any CartSource, didResync carts: [Cart], because reason: ResyncReason) {
        note { $0.resyncs.append((reason, carts)) }
    }

    func cartSource(_ store: any CartSource, connectionDidChange state: CartConnectionState) {
        note { $0.states.append(state) }
    }

    func cartSource(_ store: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {
        note { $0.refusals.append((carts, error)) }
    }

    func cartSource(_ store: any CartSource, didChangePending pending: [PendingWrite], showing cart: Cart) {
        note { $0.shown.append((pending, cart)) }
    }

    func cartSource(_ store: any CartSource, didReject write: PendingWrite, because error: RemoteStoreError) {
        note { $0.rejections.append((write, error)) }
    }

    var refusals: [(carts: [String], error: RemoteStoreError)] { record.withLockedValue { $0.refusals } }
    var shown: [(pending: [PendingWrite], cart: Cart)] { record.withLockedValue { $0.shown } }

    var isLoaded: Bool { record.withLockedValue { $0.loaded != nil } }
    var events: [CartEvent] { record.withLockedValue { $0.events } }
    var loadedVersions: [String: Int64] {
        record.withLockedValue { Dictionary(uniqueKeysWithValues: ($0.loaded ?? []).map { ($0.id, $0.version) }) }
    }

    /// What this observer must have received of `log`: the events of its carts after the
    /// versions it was loaded at, in order.
    func expected(of log: [CartEvent], selection: CartSelection) -> [CartEvent] {
        let start = loadedVersions
        return log.filter { selection.contains($0.cartID) && $0.version > (start[$0.cartID] ?? 0) }
    }
}

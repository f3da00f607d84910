import FanoutConcurrency
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// A subscription to a fanout-server that outlives its connections: connect, subscribe after
/// the resume position, heartbeat, hand over every message; on any disconnect, back off (with
/// jitter) and do it again. Every event once, in seq order, across disconnects.
///
/// This is the layer under `RemoteCartStore`, for programs that want the messages themselves
/// (`fanout-client subscribe` prints them). The handler is called for one message at a time,
/// in order; it advances the resume position itself (`ResumePosition`), so that acting on a
/// message and recording it can be one step.
public struct FanoutSubscription: Sendable {
    /// How the subscription travels.
    public enum Transport: String, Sendable, CaseIterable {
        /// A WebSocket to `/subscribe` (the default): heartbeats keep the lease.
        case webSocket = "websocket"
        /// Server-Sent Events from `/subscribe`, for networks a WebSocket cannot pass.
        case serverSentEvents = "sse"
    }

    /// What one connection asks for: which carts (nil: all), after which seq (nil: from a
    /// snapshot), and whether to be present on them.
    public struct Plan: Sendable, Hashable {
        public var carts: [String]?
        public var since: Int64?
        /// Presence on the carts (named ones only: the server refuses it on all carts), with
        /// the member's key and state; nil: not present, and no presence messages.
        public var presence: PresenceRequest?

        public init(carts: [String]?, since: Int64?, presence: PresenceRequest? = nil) {
            self.carts = carts
            self.since = since
            self.presence = presence
        }
    }

    /// What the handler is told.
    public enum Update: Sendable {
        /// A connection is being made for `plan`.
        case connecting(Plan)
        /// The server accepted the subscription.
        case welcome(ServerMessage.Welcome)
        /// A whole snapshot (its parts put together), and why it was sent; events after its
        /// seq follow.
        case snapshot(CartSnapshot, reason: SnapshotReason)
        /// One part of a snapshot as it arrived (`raw` is its text): for programs that show
        /// parts; `snapshot` follows the last.
        case snapshotPart(carts: [Cart], seq: Int64, reason: SnapshotReason, more: Bool, raw: String)
        /// An event, with the text it came in.
        case event(CartEvent, raw: String)
        /// The server reported an error on the open subscription.
        case serverError(code: String, message: String)
        /// A presence message of one of the carts (`ServerMessage.presence`, `.presenceJoin`,
        /// `.presenceUpdate` or `.presenceLeave`), with the text it came in.
        case presence(ServerMessage, raw: String)
        /// The server refused the plan's presence (`presence_full`, `invalid_presence`,
        /// `invalid_presence_state`): the subscription goes on without it on this connection
        /// (the carts only); the next connection asks again.
        case presenceRefused(RemoteStoreError)
        /// The connection ended, or could not be made (or the plan could not be made: reading
        /// newly wanted carts failed); another attempt follows after `retryIn`.
        case disconnected(ConnectionProblem, retryIn: Duration)
        /// The server refused the credentials (or the origin): no retry until `retryIn` has
        /// passed or the plan changes (`reconsider`).
        case refused(RemoteStoreError, retryIn: Duration)
    }

    let api: CartServerAPI
    let transport: Transport

    /// - Parameters:
    ///   - server: `http://host:port` (or `https://`) of the fanout-server.
    ///   - transport: WebSocket (the default), or Server-Sent Events.
    ///   - credentials: the token, or how to get a fresh one before each connection.
    ///   - trust: for `https://`, the certificate authorities to trust: the system's, or the
    ///     app's own (`ServerTrust.certificates(pemFile:)`).
    public init(server: URL, transport: Transport = .webSocket, credentials: Credentials = .none, trust: ServerTrust = .system) {
        api = CartServerAPI(baseURL: server, credentials: credentials, trust: trust)
        self.transport = transport
    }

    /// How long a refused subscription waits before it asks again when its credentials have
    /// not changed (a provider that has another token is tried again after the usual backoff,
    /// at least 1 s): refusals never become a retry storm.
    public static let refusalPause: Duration = .seconds(30)

    /// Runs until cancelled, or until `handle` throws an error other than `ProtocolViolation`.
    /// Nothing else ends it: a plan that cannot be made, a connection that fails, a server that
    /// refuses are each reported (`disconnected`, `refused`) and tried again after a pause.
    ///
    /// - Parameters:
    ///   - plan: asked before each connection; nil means nothing to subscribe to: no
    ///     connection until `reconsider` yields. An error it throws is a failed attempt: a
    ///     refusal is reported as `refused`, anything else as `disconnected`, and it is asked
    ///     again after the pause.
    ///   - reconsider: each element ends the current connection (or pause) and asks `plan`
    ///     again: the interest changed.
    ///   - handle: called with each update, in order. Throwing `ProtocolViolation` drops the
    ///     connection and resumes; any other error ends the subscription.
    public func run(
        plan: @Sendable () async throws -> Plan?,
        reconsider: AsyncStream<Void>,
        handle: @escaping @Sendable (Update) async throws -> Void
    ) async throws {
        try await run(plan: plan, wakeUps: WakeUps(reconsider), presenceStates: nil, clock: ContinuousClock(), handle: handle)
    }

    /// `run`, woken by `wakeUps` (a `RemoteCartStore` wakes it when its `SubscriptionDemand`
    /// says so), with the presence state changing while a connection is open: each change is
    /// sent on a WebSocket, and an event stream is replaced by one with the new state (see
    /// `PresenceStates`). The pause before each new attempt is slept on `clock` (heartbeats and
    /// the server's silence keep wall time: the server's lease does).
    package func run(
        plan: @Sendable () async throws -> Plan?,
        wakeUps: WakeUps,
        presenceStates: PresenceStates?,
        clock: any Clock<Duration>,
        handle: @escaping @Sendable (Update) async throws -> Void
    ) async throws {
        let consumer = handle
        /// The code of the last `server-error` of the current connection: why the server ended it.
        let lastServerError = NIOLockedValueBox<FanoutErrorCode?>(nil)
        // The handler's own errors end the subscription; everything else the connection
        // throws (NIO's, TLS's, the network's) is a lost connection, retried.
        let deliver: @Sendable (Update) async throws -> Void = { update in
            if case .serverError(let code, _) = update { lastServerError.withLockedValue { $0 = FanoutErrorCode(rawValue: code) } }
            do {
                try await consumer(update)
            } catch let violation as ProtocolViolation {
                throw violation
            } catch {
                throw HandlerFailure(error: error)
            }
        }
        var failures = 0
        /// A token already fetched after a refusal, for the next attempt: the provider is asked
        /// once per attempt.
        var fetched: String??
        while true {
            try Task.checkCancellation()
            /// Why the attempt ended: every one ends, if only because the server closed it.
            let failure: any Error
            var token: String?
            var received = 0
            /// The connection was cut short by a new plan (not a plan that failed before it).
            var interrupted = false
            do {
                guard let next = try await plan() else {
                    await wakeUps.next()
                    continue
                }
                try await deliver(.connecting(next))
                let counter = Counter()
                lastServerError.withLockedValue { $0 = nil }
                defer { received = counter.value }
                if let already = fetched {
                    token = already
                } else {
                    token = try await api.credentials.tokenForConnection()
                }
                fetched = nil
                defer { interrupted = wakeUps.wokeUp }
                try await wakeUps.interrupting { [token] in
                    try await self.connect(next, token: token, received: counter, presenceStates: presenceStates, handle: deliver)
                }
                failure = ConnectionProblem.endedByServer(closeCode: nil, code: lastServerError.withLockedValue { $0 })
            } catch let handlerFailure as HandlerFailure {
                throw handlerFailure.error
            } catch {
                try Task.checkCancellation()
                failure = error
            }
            try Task.checkCancellation()
            // The plan changed: connect again at once, with the new one.
            if interrupted { continue }
            failures = received > 0 ? 0 : failures + 1
            var pause = Self.backoff(failures: failures)
            switch failure {
            case let refused as RemoteStoreError where refused.isPermanent:
                // The same credentials would be refused again: ask again much later, unless a
                // provider already has another token (the one refused had just expired, say).
                let next = try? await api.credentials.token()
                let changed = next != nil && next != token
                pause = changed ? max(pause, .seconds(1)) : Self.refusalPause
                // A new token is used at once; after the long pause the provider is asked anew
                // (`.none`, not a fetched nil: that would connect with no token at all).
                fetched = changed ? .some(next) : .none
                try await consumer(.refused(refused, retryIn: pause))
            default:
                try await consumer(.disconnected(ConnectionProblem.of(failure), retryIn: pause))
            }
            let wait = pause
            _ = try? await wakeUps.interrupting { try await clock.sleep(for: wait) }
        }
    }

    /// Full jitter over an exponential ceiling: 0.1 s doubling to 5 s.
    static func backoff(failures: Int) -> Duration {
        let ceiling = min(5.0, 0.1 * pow(2.0, Double(min(failures, 10))))
        return .milliseconds(Int(Double.random(in: 0.05...max(0.05, ceiling)) * 1_000))
    }

    /// One connection for `plan`; when the server refuses its presence, the same subscription
    /// without presence at once (said as `presenceRefused`).
    private func connect(
        _ plan: Plan, token: String?, received: Counter, presenceStates: PresenceStates?,
        handle: @escaping @Sendable (Update) async throws -> Void
    ) async throws {
        try await preflight(plan, token: token)
        do {
            try await connectOnce(plan, token: token, received: received, presenceStates: presenceStates, handle: handle)
        } catch let refusal as PresenceRefusal {
            try await handle(.presenceRefused(refusal.error))
            var withoutPresence = plan
            withoutPresence.presence = nil
            try await connectOnce(withoutPresence, token: token, received: received, presenceStates: nil, handle: handle)
        }
    }

    private func connectOnce(
        _ plan: Plan, token: String?, received: Counter, presenceStates: PresenceStates?,
        handle: @escaping @Sendable (Update) async throws -> Void
    ) async throws {
        switch transport {
        case .webSocket:
            var reader = MessageReader(handle: handle, received: received, presenceAsked: plan.presence != nil)
            guard let url = api.subscribeURL else { throw RemoteStoreError.unexpectedAnswer("bad server URL \(api.baseURL)") }
            let closeCode: Int?
            do {
                closeCode = try await WebSocketLink.run(url: url, trust: api.trust, token: token) { messages, writer in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        defer { group.cancelAll() }
                        for try await text in messages {
                            let message = try reader.read(text)
                            if case .welcome(let welcome) = message {
                                try await writer.send(.subscribe(carts: plan.carts, since: plan.since, presence: plan.presence))
                                let interval = welcome.clientHeartbeatInterval
                                group.addTask {
                                    while true {
                                        try await Task.sleep(for: interval)
                                        try await writer.send(.heartbeat)
                                    }
                                }
                                // The server sends a message at least every heartbeat interval:
                                // a connection silent for three of them (and 2 s) is dead.
                                let silence = .seconds(welcome.heartbeatInterval * 3) + .seconds(2)
                                group.addTask {
                                    var seen = received.value
                                    while true {
                                        try await Task.sleep(for: silence)
                                        guard received.value != seen else {
                                            throw RemoteStoreError.unreachable("the server went silent for \(silence)")
                                        }
                                        seen = received.value
                                    }
                                }
                                if let presenceStates, let asked = plan.presence {
                                    group.addTask { try await presenceStates.send(after: asked.state, with: writer) }
                                }
                                // A signed token is replaced in band before it expires.
                                if let token, let expiry = Credentials.expiry(of: token) {
                                    group.addTask { try await self.refreshInBand(token, expiring: expiry, with: writer) }
                                }
                            }
                            try await reader.deliver(message, raw: text)
                        }
                    }
                }
            } catch is WebSocketLink.UpgradeRefused {
                // Accepted by the HTTP API a moment ago: a full server, most likely.
                throw RemoteStoreError.unreachable("the server refused the WebSocket upgrade (full, or stopping)")
            }
            if let closeCode, closeCode != 1000 {
                throw ConnectionProblem.endedByServer(closeCode: closeCode, code: FanoutErrorCode(closeCode: closeCode))
            }
        case .serverSentEvents:
            // A stream whose presence state changes, or whose token expires, is handed over to
            // a new stream (an event stream cannot send anything).
            let refreshable = token.flatMap(Credentials.expiry(of:)) != nil
            if (presenceStates != nil && plan.presence != nil) || refreshable {
                try await EventStreamHandover(
                    subscription: self, token: token, received: received,
                    presenceStates: plan.presence == nil ? nil : presenceStates, handle: handle
                ).run(plan)
            } else {
                try await stream(
                    plan, token: token, reader: MessageReader(handle: handle, received: received, presenceAsked: plan.presence != nil))
            }
        }
    }

    /// Sends a fresh token on the WebSocket (`refresh`) a while before each one expires, for as
    /// long as the provider has one; without one the server ends the connection at `exp`
    /// (4003), and the next connection asks the provider again.
    private func refreshInBand(_ token: String, expiring expiry: Date, with writer: WebSocketLink.Writer) async throws {
        var (current, expiry) = (token, expiry)
        while true {
            try await Task.sleep(for: Credentials.refreshDelay(until: expiry))
            guard let fresh = try await api.credentials.fresher(than: current, expiring: expiry) else { return }
            try await writer.send(.refresh(token: fresh))
            guard let next = Credentials.expiry(of: fresh) else { return }
            (current, expiry) = (fresh, next)
        }
    }

    /// One event stream for `plan`, read until the server ends it. `whenJoined` runs once the
    /// stream is past its welcome (at its first presence message, the server has made it a
    /// member of its carts' presence; without presence, at the welcome), before anything of it
    /// is handed on.
    func stream(_ plan: Plan, token: String?, reader: MessageReader, whenJoined: (@Sendable () async throws -> Void)? = nil)
        async throws
    {
        var reader = reader
        var whenJoined = whenJoined
        /// The welcome, kept until `whenJoined` has run.
        var held: [(ServerMessage, String)] = []
        guard let url = streamURL(for: plan) else { throw RemoteStoreError.unexpectedAnswer("bad server URL \(api.baseURL)") }
        do {
            try await EventStreamLink(url: url, trust: api.trust, token: token, lastEventID: plan.since).run { text in
                let message = try reader.read(text)
                if let joined = whenJoined {
                    switch message {
                    case .welcome where plan.presence == nil:
                        whenJoined = nil
                        try await joined()
                    case .welcome, .heartbeat:
                        return held.append((message, text))
                    default:
                        whenJoined = nil
                        try await joined()
                        for (message, text) in held { try await reader.deliver(message, raw: text) }
                        held = []
                    }
                }
                try await reader.deliver(message, raw: text)
            }
        } catch let error as RemoteStoreError where plan.presence != nil && error.code?.refusesPresence == true {
            throw PresenceRefusal(error: error)
        }
    }

    /// `/subscribe?carts=…&presenceKey=…&presenceState=…` of this server.
    private func streamURL(for plan: Plan) -> URL? {
        guard var components = URLComponents(url: api.baseURL, resolvingAgainstBaseURL: false) else { return nil }
        components.path = "/subscribe"
        var query: [URLQueryItem] = []
        if let carts = plan.carts { query.append(URLQueryItem(name: "carts", value: carts.joined(separator: ","))) }
        if let presence = plan.presence {
            query.append(URLQueryItem(name: "presence", value: "1"))
            if let key = presence.key { query.append(URLQueryItem(name: "presenceKey", value: key)) }
            if !presence.state.isEmpty, let state = try? FanoutJSON.encoder().encode(presence.state) {
                query.append(URLQueryItem(name: "presenceState", value: String(decoding: state, as: UTF8.self)))
            }
        }
        components.queryItems = query.isEmpty ? nil : query
        // `URLComponents` leaves `+` as it is, which a query reads as a space.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return components.url
    }

    /// Asks the HTTP API (with the token, for the same carts) whether we may subscribe at all,
    /// so a refusal (401, 403) is reported as the server's error instead of a failed upgrade.
    /// Anything else (an unreachable server, a pruned log) is left to the connection attempt.
    private func preflight(_ plan: Plan, token: String?) async throws {
        var path = "/events?limit=1"
        if let carts = plan.carts { path += "&carts=\(carts.joined(separator: ","))" }
        do {
            _ = try await CartServerAPI(baseURL: api.baseURL, credentials: Credentials { token }, trust: api.trust).send(
                "GET", path, as: EventsPage.self)
        } catch let error as RemoteStoreError where error.isRefusal {
            throw error
        } catch {
            // Unreachable, restarting, or an old server: the connection attempt will tell.
        }
    }
}

/// An error the subscription's handler threw: it ends the subscription.
private struct HandlerFailure: Error {
    let error: any Error
}

/// The server sent what the protocol does not allow: the connection is dropped and the
/// subscription resumes from its position.
public struct ProtocolViolation: Error, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

/// The server refused a subscription's presence: it subscribes again without.
struct PresenceRefusal: Error {
    let error: RemoteStoreError
}

import CartStore
import Hummingbird

/// The event log over plain HTTP: catch-up and polling clients.
struct EventsController: Sendable {
    let store: CartStore
    let hub: FanoutHub

    func addRoutes(to group: RouterGroup<FanoutRequestContext>) {
        group.get("events", use: events)
    }

    /// The longest a long-poll may wait, in seconds.
    static let maxWait: Int64 = 60

    /// `GET /events?since=N&carts=a,b&limit=L[&wait=S]`. When the events after `since` were
    /// pruned the answer is 410 `history_too_old`, with the retained range: take `GET /carts`
    /// instead. With `wait=S` (a long-poll, S ≤ 60 seconds) and nothing after `since` yet, the
    /// request waits until an event of those carts commits or S passes (then `events` is empty).
    /// Without `carts`, the carts the credential may see. A signed token's `exp` ends the wait:
    /// 401 `invalid_token`.
    @Sendable func events(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        // Whatever is wrong with `since` is `invalid_since`, as on a WebSocket and a stream.
        let since: Int64 =
            try query.get("since").map { text -> Int64 in
                guard let value = Int64(text) else {
                    throw APIError(.invalidSince, "since must be \(ClientMessage.sinceRule) (got \(text.prefix(40)))")
                }
                return value
            } ?? 0
        let limit = try Self.integer(query.get("limit"), name: "limit").map(Int.init) ?? 100
        // Only the carts the credential may see: an explicit `carts` naming another is 403.
        let carts = try context.grant.readable(query.get("carts").map { Set($0.split(separator: ",").map(String.init)) })
        let wait = try Self.integer(query.get("wait"), name: "wait") ?? 0
        guard (0...Self.maxWait).contains(wait) else {
            throw APIError(.invalidWait, "wait must be 0–\(Self.maxWait) seconds (got \(wait))")
        }
        // A signed token's `exp` ends the wait as it ends a stream: nothing committed after it
        // is answered to this request.
        let expiry = context.grant.expiresAt.map { ContinuousClock.now.advanced(by: .seconds($0.timeIntervalSinceNow)) }
        let waitEnd = ContinuousClock.now + .seconds(wait)
        let deadline = expiry.map { min($0, waitEnd) } ?? waitEnd
        while true {
            switch try await store.events(after: since, limit: limit, carts: carts) {
            case .events(let events, let latest):
                // Its `exp` passed while the request was read (a busy server): it ends as the wait
                // would have, not with an empty page.
                if events.isEmpty, wait > 0, let expiry, ContinuousClock.now >= expiry { throw Self.tokenExpiredWhileWaiting }
                if events.isEmpty, wait > 0, ContinuousClock.now < deadline {
                    // A waiting poll holds its connection as a subscriber does: they share the room.
                    guard hub.hasRoomForOneMore else {
                        throw APIError(
                            .serverFull,
                            "the server has its maximum of \(hub.maxSubscribers) subscribers and waiting long-polls together; retry, or subscribe"
                        )
                    }
                    switch await hub.longPolls.park(after: latest, until: deadline) {
                    case .committed:
                        // Woken by a commit after `exp`: nothing of it is read for this token.
                        if let expiry, ContinuousClock.now >= expiry { throw Self.tokenExpiredWhileWaiting }
                        continue
                    case .timedOut:
                        if let expiry, expiry <= deadline { throw Self.tokenExpiredWhileWaiting }
                    case .full:
                        throw APIError(.serverFull, "\(hub.longPolls.limit) long-polls are already waiting; retry, or subscribe")
                    }
                }
                return await EventsPage(
                    events: events, latestSeq: latest, nextSince: events.last?.seq ?? since, databaseID: store.databaseID
                )
                .response(holding: events.count)
            case .tooOld(let oldest, let latest):
                throw APIError(
                    .historyTooOld,
                    "events after \(since) were pruned; read GET /carts and follow from its seq",
                    details: ["oldestRetainedSeq": oldest, "latestSeq": latest])
            }
        }
    }

    /// A long-poll's answer when its signed token expired while it waited: nothing newer was
    /// read for it, and the same `since` with a fresh token loses nothing.
    static let tokenExpiredWhileWaiting = APIError(
        .invalidToken, "the token expired while the request waited; ask again, with the same since and a fresh token")

    static func integer(_ text: String?, name: String) throws -> Int64? {
        guard let text else { return nil }
        guard let value = Int64(text) else {
            throw APIError.malformed("\(name) must be a whole number (got \(text.prefix(40)))")
        }
        return value
    }
}

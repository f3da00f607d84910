import CartStore
import Hummingbird

/// The event log over plain HTTP (catch-up and polling clients), health and figures.
struct EventsController: Sendable {
    let store: CartStore
    let hub: FanoutHub

    func addRoutes(to router: Router<FanoutRequestContext>) {
        router.get("events", use: events)
        let health = StoreHealth(store: store)
        router.get("healthz") { _, _ in
            try await health.check()
            return HealthResponse()
        }
        router.get("stats") { _, _ in await hub.statsWithLag() }
    }

    /// The longest a long-poll may wait, in seconds.
    static let maxWait: Int64 = 60

    /// `GET /events?since=N&carts=a,b&limit=L[&wait=S]`. When the events after `since` were
    /// pruned the answer is 410 `history_too_old`, with the retained range: take `GET /carts`
    /// instead. With `wait=S` (a long-poll, S ≤ 60 seconds) and nothing after `since` yet, the
    /// request waits until an event of those carts commits or S passes (then `events` is empty).
    /// Without `carts`, the carts the credential may see.
    @Sendable func events(_ request: Request, context: FanoutRequestContext) async throws -> Response {
        let query = request.uri.queryParameters
        let since = try Self.integer(query.get("since"), name: "since") ?? 0
        let limit = try Self.integer(query.get("limit"), name: "limit").map(Int.init) ?? 100
        // Only the carts the credential may see: an explicit `carts` naming another is 403.
        let carts = try context.grant.readable(query.get("carts").map { Set($0.split(separator: ",").map(String.init)) })
        let wait = try Self.integer(query.get("wait"), name: "wait") ?? 0
        guard (0...Self.maxWait).contains(wait) else {
            throw APIError(.invalidWait, "wait must be 0–\(Self.maxWait) seconds (got \(wait))")
        }
        let deadline = ContinuousClock.now + .seconds(wait)
        while true {
            switch try await store.events(after: since, limit: limit, carts: carts) {
            case .events(let events, let latest):
                if events.isEmpty, wait > 0, ContinuousClock.now < deadline {
                    switch await hub.longPolls.park(after: latest, until: deadline) {
                    case .committed: continue
                    case .timedOut: break
                    case .full:
                        throw APIError(.serverFull, "\(hub.longPolls.limit) long-polls are already waiting; retry, or subscribe")
                    }
                }
                return await EventsPage(events: events, latestSeq: latest, nextSince: events.last?.seq ?? since)
                    .response(holding: events.count)
            case .tooOld(let oldest, let latest):
                throw APIError(
                    .historyTooOld,
                    "events after \(since) were pruned; read GET /carts and follow from its seq",
                    details: ["oldestRetainedSeq": oldest, "latestSeq": latest])
            }
        }
    }

    static func integer(_ text: String?, name: String) throws -> Int64? {
        guard let text else { return nil }
        guard let value = Int64(text) else {
            throw APIError.malformed("\(name) must be a whole number (got \(text.prefix(40)))")
        }
        return value
    }
}

extension FanoutHub.Stats: ResponseEncodable {}

/// Whether the store can write, for `/healthz`: a write rolled back at once, at most once a
/// second whatever the number of probes (each takes the writer for a moment), its answer reused
/// in between. A store that cannot write throws its own error: 503 `store_unavailable`, 507
/// `storage_full`.
actor StoreHealth {
    private let store: CartStore
    private var lastProbe: (at: ContinuousClock.Instant, error: (any Error)?)?

    init(store: CartStore) { self.store = store }

    func check() async throws {
        if let lastProbe, lastProbe.at.duration(to: .now) < .seconds(1) {
            if let error = lastProbe.error { throw error }
            return
        }
        do {
            try await store.checkWritable()
            lastProbe = (.now, nil)
        } catch {
            lastProbe = (.now, error)
            throw error
        }
    }
}

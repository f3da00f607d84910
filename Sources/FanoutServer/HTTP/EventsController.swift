import CartStore
import Hummingbird

/// The event log over plain HTTP (catch-up and polling clients), health and figures.
struct EventsController: Sendable {
    let store: CartStore
    let hub: FanoutHub

    func addRoutes(to router: Router<FanoutRequestContext>) {
        router.get("events", use: events)
        router.get("healthz") { _, _ in HealthResponse() }
        router.get("stats") { _, _ in hub.stats }
    }

    /// `GET /events?since=N&carts=a,b&limit=L`. When the events after `since` were pruned the
    /// answer is 410 `history_too_old`, with the retained range: take `GET /carts` instead.
    @Sendable func events(_ request: Request, context: FanoutRequestContext) async throws -> EventsPage {
        let query = request.uri.queryParameters
        let since = try Self.integer(query.get("since"), name: "since") ?? 0
        let limit = try Self.integer(query.get("limit"), name: "limit").map(Int.init) ?? 100
        let carts = query.get("carts").map { Set($0.split(separator: ",").map(String.init)) }
        switch try await store.events(after: since, limit: limit, carts: carts) {
        case .events(let events, let latest):
            return EventsPage(events: events, latestSeq: latest, nextSince: events.last?.seq ?? since)
        case .tooOld(let oldest, let latest):
            throw APIError(
                .gone, code: CartStoreError.Code.historyTooOld.rawValue,
                "events after \(since) were pruned; read GET /carts and follow from its seq",
                details: ["oldestRetainedSeq": oldest, "latestSeq": latest])
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

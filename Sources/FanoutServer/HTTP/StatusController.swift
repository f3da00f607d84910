import CartStore
import Hummingbird

/// How the server is: `/healthz` for anyone (a load balancer), `/stats` for the operator.
struct StatusController: Sendable {
    let hub: FanoutHub
    /// The probe `/healthz` answers with (shared with `StoreWatch`).
    let health: StoreHealth

    func addRoutes(open: RouterGroup<FanoutRequestContext>, operators: RouterGroup<FanoutRequestContext>) {
        let health = health
        open.get("healthz") { _, _ in
            try await health.check()
            return HealthResponse()
        }
        operators.get("stats") { _, _ in await hub.statsWithLag() }
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

import Hummingbird

/// `GET /metrics`: every metric in the Prometheus text exposition format (version 0.0.4).
struct MetricsController: Sendable {
    let metrics: ServerMetrics
    let hub: FanoutHub

    func addRoutes(to router: RouterGroup<FanoutRequestContext>) {
        router.get("metrics") { _, _ in
            metrics.hub.show(
                hub.figures, waitingChanges: hub.store.waitingChanges,
                gauges: .init(
                    behindBy: await hub.behindBy(), presenceMembers: hub.presence.memberCounts(),
                    idempotencyKeys: metrics.idempotencyKeys.withLockedValue { $0 }))
            metrics.process.update()
            return Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
        }
    }
}

import CoreMetrics
import Metrics
import NIOConcurrencyHelpers
import Prometheus

/// One application's metrics, exported at `GET /metrics` in Prometheus text.
///
/// Each application has its own `PrometheusCollectorRegistry`, and every metric is made with
/// that registry's factory passed explicitly (`CoreMetrics.Counter(label:dimensions:factory:)`), never
/// through the global `MetricsSystem`. `MetricsSystem.bootstrap` may run once per process, and
/// the tests build many applications in one process: with a global registry each test would
/// see the others' counts. For the same reason Hummingbird's `MetricsMiddleware`, which records
/// through the global system, is not used; `RequestMetricsMiddleware` times the mutations.
struct ServerMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    let hub: HubMetrics
    let requests: RequestMetrics
    let process: ProcessMetrics

    init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // A mutation is an fsync'd SQLite commit: milliseconds, not the default's 5 ms and up.
        factory.durationHistogramBuckets[RequestMetrics.mutationDurationName] = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5),
        ]
        hub = HubMetrics(factory: factory)
        requests = RequestMetrics(factory: factory)
        process = ProcessMetrics(registry: registry)
    }

    /// The Prometheus text exposition of every metric so far.
    func exposition() -> [UInt8] { registry.emitToBuffer() }
}

/// The hub's figures (`FanoutHub.Figures`) as metrics: subscribers by transport and state, their
/// ends, events and deliveries.
///
/// The hub counts once, in its registry; this is a second view of the same counts, brought up to
/// date at each scrape (`show`): the gauges set, the counters advanced by what happened since
/// the last scrape. Nothing is counted twice on a subscriber's way.
final class HubMetrics: Sendable {
    private let subscribers: [[Meter]]
    private let ends: [[String: CoreMetrics.Counter]]
    private let eventsCommitted: CoreMetrics.Counter
    private let deliveries: CoreMetrics.Counter
    private let waitingChanges: Meter
    /// What the counters were advanced to at the last scrape.
    private let shown = NIOLockedValueBox(FanoutHub.Figures())

    init(factory: any MetricsFactory) {
        // Made up front, so `/metrics` shows every series at 0 before anything happened.
        subscribers = WireFraming.allCases.map { framing in
            FanoutHub.CountedPhase.allCases.map { phase in
                Meter(
                    label: "fanout_subscribers", dimensions: [("transport", framing.metricLabel), ("state", phase.label)], factory: factory)
            }
        }
        ends = WireFraming.allCases.map { framing in
            Dictionary(
                uniqueKeysWithValues: EndReason.names.map { reason in
                    (
                        reason,
                        CoreMetrics.Counter(
                            label: "fanout_subscriber_ends_total",
                            dimensions: [("transport", framing.metricLabel), ("reason", reason)], factory: factory)
                    )
                })
        }
        eventsCommitted = CoreMetrics.Counter(label: "fanout_events_committed_total", factory: factory)
        deliveries = CoreMetrics.Counter(label: "fanout_deliveries_total", factory: factory)
        waitingChanges = Meter(label: "fanout_changes_waiting", factory: factory)
    }

    /// Brings the metrics up to `figures`, and the store's queue to `waitingChanges`.
    func show(_ figures: FanoutHub.Figures, waitingChanges: Int) {
        self.waitingChanges.set(waitingChanges)
        shown.withLockedValue { shown in
            for framing in WireFraming.allCases {
                for phase in FanoutHub.CountedPhase.allCases {
                    subscribers[framing.rawValue][phase.rawValue].set(figures.now[framing.rawValue][phase.rawValue])
                }
                for (reason, count) in figures.ended[framing.rawValue] {
                    let before = shown.ended[framing.rawValue][reason] ?? 0
                    if count > before { ends[framing.rawValue][reason]?.increment(by: count - before) }
                }
            }
            if figures.eventsFannedOut > shown.eventsFannedOut {
                eventsCommitted.increment(by: figures.eventsFannedOut - shown.eventsFannedOut)
            }
            if figures.deliveries > shown.deliveries { deliveries.increment(by: figures.deliveries - shown.deliveries) }
            shown = figures
        }
    }
}

extension FanoutHub.CountedPhase {
    /// The `state` label of the subscriber gauge.
    var label: String {
        switch self {
        case .connected: "connected"
        case .catchingUp: "catching_up"
        case .live: "live"
        }
    }
}

extension WireFraming {
    /// The `transport` label of the subscriber metrics, and its name in `/stats`.
    var metricLabel: String {
        switch self {
        case .webSocket: "websocket"
        case .serverSentEvents: "sse"
        }
    }
}

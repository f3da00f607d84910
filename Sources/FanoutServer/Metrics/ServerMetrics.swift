import CoreMetrics
import Metrics
import NIOConcurrencyHelpers
import Prometheus

/// One application's metrics, exported at `GET /metrics` in Prometheus text, each family with
/// its `# HELP` (`MetricHelp`).
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
    /// Idempotency keys kept, as the pruner last counted them.
    let idempotencyKeys = NIOLockedValueBox<Int?>(nil)

    init() {
        registry = PrometheusCollectorRegistry()
        let factory = DescribedMetricsFactory(registry: registry)
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
    private let behind: Meter
    private let presenceMembers: [Meter]
    private let idempotencyKeys: Meter

    /// What the gauges read at a scrape, besides the hub's figures.
    struct Gauges {
        /// Committed events not yet delivered by this server (nil: the database could not be read).
        var behindBy: Int64?
        /// Presence members on the carts this server knows: held by its subscribers, and by
        /// other servers' (PostgreSQL).
        var presenceMembers: (here: Int, elsewhere: Int)
        /// Idempotency keys kept, as of the last prune (nil before it).
        var idempotencyKeys: Int?
    }
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
        eventsCommitted = CoreMetrics.Counter(label: "fanout_events_fanned_out_total", factory: factory)
        deliveries = CoreMetrics.Counter(label: "fanout_deliveries_total", factory: factory)
        waitingChanges = Meter(label: "fanout_changes_waiting", factory: factory)
        behind = Meter(label: "fanout_events_behind", factory: factory)
        presenceMembers = [
            Meter(label: "fanout_presence_members", dimensions: [("held", "here")], factory: factory),
            Meter(label: "fanout_presence_members", dimensions: [("held", "elsewhere")], factory: factory),
        ]
        idempotencyKeys = Meter(label: "fanout_idempotency_keys", factory: factory)
    }

    /// Brings the metrics up to `figures`, the store's queue to `waitingChanges`, and the
    /// gauges to what the server knows now.
    func show(_ figures: FanoutHub.Figures, waitingChanges: Int, gauges: Gauges) {
        self.waitingChanges.set(waitingChanges)
        if let behindBy = gauges.behindBy { behind.set(behindBy) }
        presenceMembers[0].set(gauges.presenceMembers.here)
        presenceMembers[1].set(gauges.presenceMembers.elsewhere)
        if let keys = gauges.idempotencyKeys { idempotencyKeys.set(keys) }
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

/// swift-metrics' factory onto one Prometheus registry, giving each family its `# HELP`
/// (`MetricHelp`) and each duration histogram its buckets. swift-prometheus's own factory gives
/// none, and its registry refuses one family made with two help texts, so every metric of the
/// server's own is made here.
struct DescribedMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry

    /// A mutation is an fsync'd SQLite commit: milliseconds, not the default's 5 ms and up.
    static let mutationBuckets: [Duration] = [
        .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
        .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
        .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5),
    ]

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: MetricHelp.descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: MetricHelp.descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        // The server records no distributions but durations (`makeTimer`): a recorder is a gauge.
        registry.makeGauge(descriptor: MetricHelp.descriptor(label), labels: dimensions)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: MetricHelp.descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        registry.makeDurationHistogram(descriptor: MetricHelp.descriptor(label), labels: dimensions, buckets: Self.mutationBuckets)
    }

    func destroyCounter(_ handler: any CounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        if let counter = handler as? Prometheus.Counter { registry.unregisterCounter(counter) }
    }

    func destroyRecorder(_ handler: any RecorderHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    func destroyMeter(_ handler: any MeterHandler) {
        if let gauge = handler as? Prometheus.Gauge { registry.unregisterGauge(gauge) }
    }

    func destroyTimer(_ handler: any TimerHandler) {
        if let histogram = handler as? DurationHistogram { registry.unregisterDurationHistogram(histogram) }
    }
}

/// What each of the server's metric families counts: its `# HELP` line, and the one list of
/// them (docs/OPERATING.md's table says the same).
enum MetricHelp {
    static let texts: [String: String] = [
        "fanout_subscribers": "Subscribers now, by transport and state (connected, catching_up, live).",
        "fanout_subscriber_ends_total": "Subscribers ended, by transport and reason.",
        "fanout_events_fanned_out_total": "Committed events this server fanned out to its subscribers, each once.",
        "fanout_deliveries_total": "Event x subscriber pairs queued: the sum of the mutations' deliveredTo.",
        "fanout_changes_waiting": "Changes queued for the store's writer now (past 4096 a change is refused overloaded).",
        "fanout_events_behind":
            "Committed events this server has not yet delivered (with PostgreSQL: other servers' commits on their way here).",
        "fanout_presence_members":
            "Presence members on the carts this server follows, held by its own subscribers (here) or by other servers' (elsewhere).",
        "fanout_idempotency_keys": "Idempotency keys kept to answer a repeated change, as of the last prune (at most a minute old).",
        "fanout_mutation_duration_seconds": "HTTP mutations, request to response, by route, method and status.",
        "fanout_store_errors_total": "Error answers carrying a store error code, by code.",
        "fanout_requests_refused_total": "Requests and subscriptions refused with an error answer, by error code.",
    ]

    /// `name` with its help; a family without one is a mistake the tests catch (every `# TYPE`
    /// has its `# HELP`).
    static func descriptor(_ name: String) -> MetricNameDescriptor {
        // The whole name as the base: the descriptor joins its parts with `_`, an empty unit
        // adds nothing.
        MetricNameDescriptor(metricName: name, unitName: "", helpText: texts[name] ?? "")
    }
}

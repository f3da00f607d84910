import CoreMetrics
import Metrics
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
    }

    /// The Prometheus text exposition of every metric so far.
    func exposition() -> [UInt8] { registry.emitToBuffer() }
}

/// What the hub counts: subscribers by transport and state, their ends, events and deliveries.
///
/// The hub calls it at each step of a subscriber's life (`FanoutHub.connect`, `subscribed`,
/// `wentLive`, `forget`), on the subscriber's event loop, so each subscriber's moves between
/// gauges are in order; the gauges and counters themselves are atomic.
struct HubMetrics: Sendable {
    /// The states a subscriber is counted in before it ends.
    enum State: CaseIterable {
        case connected, catchingUp, live

        init?(_ phase: Subscriber.Phase) {
            switch phase {
            case .connected: self = .connected
            case .catchingUp: self = .catchingUp
            case .live: self = .live
            case .ended: return nil
            }
        }

        var label: String {
            switch self {
            case .connected: "connected"
            case .catchingUp: "catching_up"
            case .live: "live"
            }
        }
    }

    private let subscribers: [Key: Meter]
    private let ends: [EndKey: CoreMetrics.Counter]
    private let eventsCommitted: CoreMetrics.Counter
    private let deliveries: CoreMetrics.Counter

    private struct Key: Hashable {
        let framing: WireFraming
        let state: State
    }

    private struct EndKey: Hashable {
        let framing: WireFraming
        let reason: String
    }

    /// Counts nothing: for hubs made outside an application (unit tests).
    static let disabled = HubMetrics(factory: NOOPMetricsHandler.instance)

    init(factory: any MetricsFactory) {
        var subscribers: [Key: Meter] = [:]
        var ends: [EndKey: CoreMetrics.Counter] = [:]
        // Made up front, so `/metrics` shows every series at 0 before anything happened.
        for framing in WireFraming.allCases {
            for state in State.allCases {
                subscribers[Key(framing: framing, state: state)] = Meter(
                    label: "fanout_subscribers",
                    dimensions: [("transport", framing.metricLabel), ("state", state.label)], factory: factory)
            }
            for reason in EndReason.names {
                ends[EndKey(framing: framing, reason: reason)] = CoreMetrics.Counter(
                    label: "fanout_subscriber_ends_total",
                    dimensions: [("transport", framing.metricLabel), ("reason", reason)], factory: factory)
            }
        }
        self.subscribers = subscribers
        self.ends = ends
        eventsCommitted = CoreMetrics.Counter(label: "fanout_events_committed_total", factory: factory)
        deliveries = CoreMetrics.Counter(label: "fanout_deliveries_total", factory: factory)
    }

    /// A subscriber entered `phase` (from nowhere: `connect`).
    func entered(_ phase: Subscriber.Phase, _ subscriber: Subscriber) {
        meter(subscriber, phase)?.increment()
    }

    /// A subscriber moved from one phase to the next.
    func moved(_ subscriber: Subscriber, from old: Subscriber.Phase, to new: Subscriber.Phase) {
        meter(subscriber, old)?.decrement()
        meter(subscriber, new)?.increment()
    }

    /// A subscriber in `phase` ended for `reason`.
    func ended(_ subscriber: Subscriber, wasIn phase: Subscriber.Phase, because reason: EndReason) {
        meter(subscriber, phase)?.decrement()
        ends[EndKey(framing: subscriber.framing, reason: reason.name)]?.increment()
    }

    /// The store committed an event, and the hub queued it to `deliveredTo` subscribers.
    func committed(deliveredTo: Int) {
        eventsCommitted.increment()
        deliveries.increment(by: deliveredTo)
    }

    private func meter(_ subscriber: Subscriber, _ phase: Subscriber.Phase) -> Meter? {
        State(phase).flatMap { subscribers[Key(framing: subscriber.framing, state: $0)] }
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

import CartStore
import CoreMetrics
import Hummingbird
import Logging
import Metrics
import NIOConcurrencyHelpers

/// What the HTTP side counts: how long mutations take, and the store's errors by code.
struct RequestMetrics: Sendable {
    static let mutationDurationName = "fanout_mutation_duration_seconds"
    static let refusedName = "fanout_requests_refused_total"

    private let factory: any MetricsFactory
    /// Made on first use: one per (route, method, status) seen, and one per store error code.
    private let timers = NIOLockedValueBox<[String: CoreMetrics.Timer]>([:])
    private let storeErrors = NIOLockedValueBox<[String: CoreMetrics.Counter]>([:])
    private let refusals = NIOLockedValueBox<[String: CoreMetrics.Counter]>([:])

    init(factory: any MetricsFactory) {
        self.factory = factory
    }

    func mutation(route: String, method: HTTPRequest.Method, status: HTTPResponse.Status, took duration: Duration) {
        let dimensions = [("route", route), ("method", method.rawValue), ("status", String(status.code))]
        let key = dimensions.map(\.1).joined(separator: " ")
        let timer = timers.withLockedValue { timers in
            if let timer = timers[key] { return timer }
            let timer = CoreMetrics.Timer(label: Self.mutationDurationName, dimensions: dimensions, factory: factory)
            timers[key] = timer
            return timer
        }
        timer.record(duration: duration)
    }

    /// Counts an error answer: by its code, and among the store's errors if it is one
    /// (`FanoutErrorCode.isStoreError`).
    func failed(code: FanoutErrorCode) {
        count(code, in: refusals, as: Self.refusedName)
        if code.isStoreError { count(code, in: storeErrors, as: "fanout_store_errors_total") }
    }

    private func count(_ code: FanoutErrorCode, in counters: NIOLockedValueBox<[String: CoreMetrics.Counter]>, as name: String) {
        // One counter per code: the codes are a fixed set, so the series are bounded.
        let counter = counters.withLockedValue { counters in
            if let counter = counters[code.rawValue] { return counter }
            let counter = CoreMetrics.Counter(label: name, dimensions: [("code", code.rawValue)], factory: factory)
            counters[code.rawValue] = counter
            return counter
        }
        counter.increment()
    }
}

/// Times every request to a cart route that changes something, and counts and logs (at debug)
/// every refused request (`Refusals`).
///
/// Added before `ErrorMiddleware`, so it wraps it: every error it sees is already the `APIError`
/// the client gets, with its final status and code (a `CartStoreError` keeps its code there).
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: RequestMetrics
    /// Told of the store's refusals, to look at the store's condition.
    let watch: StoreWatch?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        // The route's pattern (`/carts/{cartID}/items`), not the path: bounded label values.
        let route = request.method == .get || request.method == .head ? nil : context.endpointPath
        do {
            let response = try await next(request, context)
            if let route {
                metrics.mutation(route: route, method: request.method, status: response.status, took: ContinuousClock.now - start)
            }
            return response
        } catch let error as APIError {
            Refusals(metrics: metrics, logger: context.logger, watch: watch)
                .record(error, method: request.method.rawValue, route: route ?? context.endpointPath ?? request.uri.path, since: start)
            if let route {
                metrics.mutation(route: route, method: request.method, status: error.status, took: ContinuousClock.now - start)
            }
            throw error
        }
    }
}

/// A refused request or subscription (its error answer): counted by code
/// (`fanout_requests_refused_total`, and `fanout_store_errors_total` for the store's codes),
/// and logged at debug with its method, route, status, code and duration. Never its query
/// (where a `?token=` goes), headers or body.
struct Refusals: Sendable {
    let metrics: RequestMetrics
    let logger: Logger
    /// Told of the store's refusals (`store_unavailable`, `storage_full`).
    var watch: StoreWatch?

    func record(_ error: APIError, method: String, route: String, since start: ContinuousClock.Instant? = nil) {
        metrics.failed(code: error.code)
        watch?.noticed(error.code)
        guard logger.logLevel <= .debug else { return }
        var metadata: Logger.Metadata = [
            "fanout.method": "\(method.prefix(16))", "fanout.route": "\(route.prefix(200))",
            "fanout.status": "\(error.status.code)", "fanout.code": "\(error.code.rawValue)",
        ]
        if let start { metadata["fanout.took_ms"] = "\((ContinuousClock.now - start).milliseconds)" }
        logger.debug("request refused", metadata: metadata)
    }
}

extension Duration {
    /// Whole milliseconds, for logs.
    var milliseconds: Int64 { components.seconds * 1_000 + components.attoseconds / 1_000_000_000_000_000 }
}

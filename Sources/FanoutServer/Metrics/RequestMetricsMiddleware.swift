import CartStore
import CoreMetrics
import Hummingbird
import Metrics
import NIOConcurrencyHelpers

/// What the HTTP side counts: how long mutations take, and the store's errors by code.
struct RequestMetrics: Sendable {
    static let mutationDurationName = "fanout_mutation_duration_seconds"

    private let factory: any MetricsFactory
    /// Made on first use: one per (route, method, status) seen, and one per store error code.
    private let timers = NIOLockedValueBox<[String: CoreMetrics.Timer]>([:])
    private let storeErrors = NIOLockedValueBox<[String: CoreMetrics.Counter]>([:])

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

    /// Counts an error answer whose code is one of the store's (`FanoutErrorCode.isStoreError`).
    func failed(code: FanoutErrorCode) {
        guard code.isStoreError else { return }
        let counter = storeErrors.withLockedValue { counters in
            if let counter = counters[code.rawValue] { return counter }
            let counter = CoreMetrics.Counter(label: "fanout_store_errors_total", dimensions: [("code", code.rawValue)], factory: factory)
            counters[code.rawValue] = counter
            return counter
        }
        counter.increment()
    }
}

/// Times every request to a cart route that changes something, and counts store errors by code.
///
/// Added before `ErrorMiddleware`, so it wraps it: every error it sees is already the `APIError`
/// the client gets, with its final status and code (a `CartStoreError` keeps its code there).
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: RequestMetrics

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
            metrics.failed(code: error.code)
            if let route {
                metrics.mutation(route: route, method: request.method, status: error.status, took: ContinuousClock.now - start)
            }
            throw error
        }
    }
}

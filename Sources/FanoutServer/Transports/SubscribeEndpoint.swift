import CartStore
import Hummingbird
import Logging
import Metrics
import NIOCore

/// `/subscribe`, for every transport: who may open a subscription there, and what a valid one
/// asks for. A transport checks its opening request with `admit`, which returns what its
/// credential allows (`Grant`), and a subscription's carts and `since` with `validate`; the
/// grant turns the carts asked for into the subscription's filter (`Grant.readable`), once, so
/// the fan-out checks nothing per event. Then `Subscriber.subscribe`.
struct SubscribeEndpoint: Sendable {
    static let path = "/subscribe"

    /// The answer to a GET of `/subscribe` that asks for no transport the server speaks.
    static let notAcceptable = APIError(
        .notAcceptable, "subscribe with a WebSocket upgrade, or with Accept: text/event-stream for Server-Sent Events")

    let hub: FanoutHub
    let configuration: ServerConfiguration
    let hosts: HostPolicy
    let access: AccessPolicy
    /// Where a refused subscription is counted and logged.
    var refusals = Refusals(metrics: RequestMetrics(factory: NOOPMetricsHandler.instance), logger: Logger(label: "fanout"))

    /// What the credential of `request` allows, on `loop`: at once for the operator's token (or
    /// where none is needed), after its verification off the loop for a signed one. The future
    /// fails with the `APIError` to answer instead of opening a subscription.
    func admit(_ request: Request, on loop: any EventLoop) -> EventLoopFuture<Grant> {
        let credential: AccessPolicy.Credential
        do {
            guard request.uri.path == Self.path else {
                throw APIError(.notFound, "no subscriptions at \(request.uri.path.prefix(100))")
            }
            guard request.method == .get else {
                throw APIError(.methodNotAllowed, "a subscription is opened with GET")
            }
            try hosts.check(request)
            try access.checkOrigin(of: request)
            credential = try access.credential(for: request, needs: .credential)
            guard !hub.isShuttingDown else {
                throw APIError(.shuttingDown, "the server is shutting down")
            }
            guard hub.hasRoomForOneMore else {
                throw APIError(
                    .serverFull, "the server has its maximum of \(hub.maxSubscribers) subscribers and waiting long-polls together")
            }
        } catch {
            return loop.makeFailedFuture(error)
        }
        switch credential {
        case .granted(let grant):
            return loop.makeSucceededFuture(grant)
        case .signed(let token):
            let promise = loop.makePromise(of: Grant.self)
            promise.completeWithTask { [access] in
                let grant = try await access.verify(token, needs: .credential)
                do throws(FanoutError) {
                    // A token that may read nothing is refused before the stream or the upgrade.
                    _ = try grant.readable(nil)
                } catch {
                    throw APIError(error)
                }
                return grant
            }
            return promise.futureResult
        }
    }

    /// The problem with a subscription's fields, if any.
    func validate(carts: [String]?, since: Int64?) -> FanoutError? {
        if let since, since < 0 {
            return FanoutError(.invalidSince, "since must be \(ClientMessage.sinceRule) (got \(since))")
        }
        guard let carts else { return nil }
        if carts.isEmpty {
            return FanoutError(.invalidCarts, "carts must name at least one cart, or be left out for all carts")
        }
        if carts.count > configuration.maxCartsPerSubscription {
            return FanoutError(
                .tooManyCarts, "a subscription may name at most \(configuration.maxCartsPerSubscription) carts (got \(carts.count))")
        }
        do {
            for cart in carts { try CartLimits.checkCartID(cart) }
        } catch {
            return error
        }
        return nil
    }
}

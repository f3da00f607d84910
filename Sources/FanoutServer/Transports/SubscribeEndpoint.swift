import CartStore
import Hummingbird

/// `/subscribe`, for every transport: who may open a subscription there, and what a valid one
/// asks for. A transport checks its opening request with `admit` and a subscription's carts and
/// `since` with `validate`, then hands them to `Subscriber.subscribe`.
struct SubscribeEndpoint: Sendable {
    static let path = "/subscribe"

    /// The answer to a GET of `/subscribe` that asks for no transport the server speaks.
    static let notAcceptable = APIError(
        .notAcceptable, code: "not_acceptable",
        "subscribe with a WebSocket upgrade, or with Accept: text/event-stream for Server-Sent Events")

    let hub: FanoutHub
    let configuration: ServerConfiguration
    let hosts: HostPolicy
    let access: AccessPolicy

    /// Throws the `APIError` to answer instead of opening a subscription for `request`.
    func admit(_ request: Request) throws {
        guard request.uri.path == Self.path else {
            throw APIError(.notFound, code: "not_found", "no subscriptions at \(request.uri.path.prefix(100))")
        }
        guard request.method == .get else {
            throw APIError(.methodNotAllowed, code: "method_not_allowed", "a subscription is opened with GET")
        }
        try hosts.check(request)
        try access.check(request, requiresToken: true)
        guard !hub.isShuttingDown else {
            throw APIError(.serviceUnavailable, code: "shutting_down", "the server is shutting down")
        }
        guard hub.subscriberCount < configuration.maxSubscribers else {
            throw APIError(.serviceUnavailable, code: "server_full", "the server has its maximum of \(configuration.maxSubscribers) subscribers")
        }
    }

    /// The problem with a subscription's fields, if any: an error code and its message.
    func validate(carts: [String]?, since: Int64?) -> (code: String, message: String)? {
        if let since, since < 0 {
            return ("invalid_since", "since must be ≥ 0 (got \(since))")
        }
        guard let carts else { return nil }
        if carts.isEmpty {
            return ("invalid_carts", "carts must name at least one cart, or be left out for all carts")
        }
        if carts.count > configuration.maxCartsPerSubscription {
            return ("too_many_carts", "a subscription may name at most \(configuration.maxCartsPerSubscription) carts (got \(carts.count))")
        }
        if let bad = carts.first(where: { !CartLimits.isValidIdentifier($0) }) {
            return ("invalid_cart_id", "cart ids are 1–64 characters of A-Z a-z 0-9 . _ - (got \"\(bad.prefix(80))\")")
        }
        return nil
    }
}

/// Every error code fanout speaks, defined once: over HTTP (`{"error":{"code","message"}}`
/// with the code's `httpStatus`), on an open WebSocket (an `error` message, then `closeCode`
/// when the code ends the subscription) and on an event stream (a `server-error` event).
///
/// The store, the server, the client and the OpenAPI document all use this list; a test checks
/// that docs/openapi.json and docs/PROTOCOL.md list the same codes.
public enum FanoutErrorCode: String, Sendable, Hashable, CaseIterable, Codable {
    // The request itself.
    case malformedRequest = "malformed_request"
    case requestTimeout = "request_timeout"
    case bodyTooLarge = "body_too_large"
    case uriTooLong = "uri_too_long"
    case headersTooLarge = "headers_too_large"
    case httpVersionNotSupported = "http_version_not_supported"
    case methodNotAllowed = "method_not_allowed"
    case notAcceptable = "not_acceptable"
    case notFound = "not_found"
    /// An `Idempotency-Key` that is empty, longer than `CartLimits.maxIdempotencyKeyLength`, not
    /// printable ASCII, or sent twice.
    case invalidIdempotencyKey = "invalid_idempotency_key"
    // Who may ask.
    /// No credential where one is needed.
    case unauthorized = "unauthorized"
    /// A wrong `--token` (the operator's shared key), when no signed tokens are configured.
    case badToken = "bad_token"
    /// A signed token that is malformed, wrongly signed, expired, not yet valid, or for another
    /// audience: the message says which.
    case invalidToken = "invalid_token"
    /// A valid token whose `carts` claim does not name the cart asked for.
    case forbiddenCart = "forbidden_cart"
    /// A valid token without the scope the request needs (`write` to change a cart, `read` to
    /// read one), or a signed token where only the operator's `--token` will do.
    case insufficientScope = "insufficient_scope"
    case originNotAllowed = "origin_not_allowed"
    case hostNotAllowed = "host_not_allowed"
    // Values outside the rules (`CartLimits`).
    case invalidCartID = "invalid_cart_id"
    case invalidSKU = "invalid_sku"
    case invalidQuantity = "invalid_quantity"
    case invalidPrice = "invalid_price"
    case invalidName = "invalid_name"
    case invalidLimit = "invalid_limit"
    /// A `since` below 0, or not a whole number.
    case invalidSince = "invalid_since"
    case invalidWait = "invalid_wait"
    /// A subscription's `carts` that names none.
    case invalidCarts = "invalid_carts"
    case tooManyCarts = "too_many_carts"
    // The carts and the log.
    case cartNotFound = "cart_not_found"
    case itemNotFound = "item_not_found"
    /// Adding would take a line past `CartLimits.quantityRange`.
    case quantityOverflow = "quantity_overflow"
    case tooManyItems = "too_many_items"
    /// `If-Match` (`expectedVersion`) named another version than the cart's.
    case versionConflict = "version_conflict"
    /// A `since` beyond the newest seq: the caller followed another log (another database).
    case sinceAhead = "since_ahead"
    /// The events after `since` were pruned: take a snapshot instead.
    case historyTooOld = "history_too_old"
    /// An `Idempotency-Key` already used (by the same credential) for another request: another
    /// cart, route or body. Nothing was written.
    case idempotencyKeyReused = "idempotency_key_reused"
    // The store.
    /// Too many changes are already waiting to be written: retry shortly.
    case overloaded = "overloaded"
    /// The disk is full: nothing was written. Writes resume once there is room.
    case storageFull = "storage_full"
    /// The database cannot be written (read-only, I/O error, gone, frozen).
    case storeUnavailable = "store_unavailable"
    /// The database was migrated by a newer version of this software.
    case schemaTooNew = "schema_too_new"
    /// Another process (or another store in this one) has the database open.
    case databaseInUse = "database_in_use"
    /// The file or database is not one of this program's: it was left untouched.
    case notAFanoutDatabase = "not_a_fanout_database"
    // The server and its subscribers.
    case shuttingDown = "shutting_down"
    /// At `--max-subscribers`, or as many long-polls already waiting.
    case serverFull = "server_full"
    case internalError = "internal_error"
    /// A WebSocket message that is not one of the protocol's.
    case badMessage = "bad_message"
    case alreadySubscribed = "already_subscribed"
    /// A WebSocket frame that breaks the rules: malformed, too large, or not UTF-8.
    case badFrame = "bad_frame"
    case binaryNotSupported = "binary_not_supported"
    /// No sign of life (a heartbeat; for a stream, its draining) for the lease.
    case leaseExpired = "lease_expired"
    /// Fell out of the live ring, or left the answers to its messages unread: resume from the
    /// log with `since`.
    case tooSlow = "too_slow"
    /// The subscription's token expired (a WebSocket may `refresh` it before then): reconnect
    /// with a fresh one and resume.
    case tokenExpired = "token_expired"
    /// A subscription's presence that cannot be: on all carts (presence needs them named), a
    /// member key outside its rules, a state change without presence.
    case invalidPresence = "invalid_presence"
    /// A presence state that is not a JSON object of at most `PresenceLimits.maxStateBytes`.
    case invalidPresenceState = "invalid_presence_state"
    /// A cart already has the server's most members (`--presence-max-members`).
    case presenceFull = "presence_full"
    /// More than `PresenceLimits.maxStateChangesPerSecond` state changes in a second.
    case presenceRateLimited = "presence_rate_limited"

    /// The HTTP status of an answer with this code; nil for the codes only ever sent on an open
    /// subscription.
    public var httpStatus: Int? {
        switch self {
        case .malformedRequest, .invalidCarts, .tooManyCarts, .invalidIdempotencyKey, .invalidPresence, .invalidPresenceState: 400
        case .unauthorized, .invalidToken: 401
        case .badToken, .originNotAllowed, .forbiddenCart, .insufficientScope: 403
        case .notFound, .cartNotFound, .itemNotFound: 404
        case .methodNotAllowed: 405
        case .notAcceptable: 406
        case .requestTimeout: 408
        case .quantityOverflow, .tooManyItems, .sinceAhead, .presenceFull: 409
        case .historyTooOld: 410
        case .versionConflict: 412
        case .bodyTooLarge: 413
        case .uriTooLong: 414
        case .hostNotAllowed: 421
        case .invalidCartID, .invalidSKU, .invalidQuantity, .invalidPrice, .invalidName, .invalidLimit, .invalidSince, .invalidWait,
            .idempotencyKeyReused:
            422
        case .presenceRateLimited: 429
        case .headersTooLarge: 431
        case .internalError: 500
        case .overloaded, .storeUnavailable, .schemaTooNew, .databaseInUse, .notAFanoutDatabase, .shuttingDown, .serverFull: 503
        case .httpVersionNotSupported: 505
        case .storageFull: 507
        case .badMessage, .alreadySubscribed, .badFrame, .binaryNotSupported, .leaseExpired, .tooSlow, .tokenExpired: nil
        }
    }

    /// The error a WebSocket close code stands for (`closeCode`'s inverse): 4000–4003, 1001,
    /// 1011, 1008; nil for the others (1000, and the frame errors, which several codes share).
    public init?(closeCode: Int) {
        guard let code = Self.allCases.first(where: { $0.closeCode == closeCode }) else { return nil }
        self = code
    }

    /// The WebSocket close code that follows this error on an open subscription, when the error
    /// ends it; nil when the subscription goes on (or, for `bad_frame`, the frame decides:
    /// 1002 malformed, 1007 not UTF-8, 1009 too large).
    public var closeCode: Int? {
        switch self {
        case .leaseExpired: Int(FanoutCloseCode.leaseExpired.rawValue)
        case .tooSlow: Int(FanoutCloseCode.tooSlow.rawValue)
        case .serverFull: Int(FanoutCloseCode.serverFull.rawValue)
        case .tokenExpired: Int(FanoutCloseCode.tokenExpired.rawValue)
        case .shuttingDown: 1001
        case .internalError: 1011
        case .binaryNotSupported: 1008
        default: nil
        }
    }

    /// Whether the cart store answers with this code (a `CartStoreError`): `/metrics` counts
    /// these by code.
    public var isStoreError: Bool {
        switch self {
        case .invalidCartID, .invalidSKU, .invalidQuantity, .invalidPrice, .invalidName, .invalidLimit, .invalidSince,
            .cartNotFound, .itemNotFound, .quantityOverflow, .tooManyItems, .versionConflict, .sinceAhead, .historyTooOld,
            .invalidIdempotencyKey, .idempotencyKeyReused, .overloaded, .storageFull, .storeUnavailable, .schemaTooNew, .databaseInUse,
            .notAFanoutDatabase:
            true
        default:
            false
        }
    }

    /// Whether the same request may succeed later as it is (a busy, stopping or failing
    /// server, a store away for a moment): clients retry these, with backoff, and report the
    /// others.
    public var isRetryable: Bool {
        switch self {
        case .overloaded, .storeUnavailable, .shuttingDown, .serverFull, .internalError, .requestTimeout: true
        default: false
        }
    }

    /// The server refused the client's credentials or origin: retrying the same way cannot
    /// help.
    public var isRefusedCredentials: Bool {
        switch self {
        case .unauthorized, .badToken, .invalidToken, .forbiddenCart, .insufficientScope, .originNotAllowed, .hostNotAllowed: true
        default: false
        }
    }
}

/// An error as fanout says it anywhere: a code from the one list, a message for people, and
/// for some codes whole-number details (a `history_too_old` answer's retained range).
///
/// The store throws it (as `CartStoreError`), the server answers it over HTTP and on open
/// subscriptions, and the client reads it back from either.
public struct FanoutError: Error, Sendable, Hashable, CustomStringConvertible {
    public let code: FanoutErrorCode
    public let message: String
    public var details: [String: Int64]

    public init(_ code: FanoutErrorCode, _ message: String, details: [String: Int64] = [:]) {
        self.code = code
        self.message = message
        self.details = details
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// The code of `error` when it is one of these.
    public static func code(_ error: any Error) -> FanoutErrorCode? {
        (error as? FanoutError)?.code
    }
}

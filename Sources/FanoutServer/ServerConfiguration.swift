import Logging
import NIOCore
import NIOSSL

/// Everything `fanout-server` can be told, as values: the command line fills one in, tests
/// build their own.
struct ServerConfiguration: Sendable {
    var host = "127.0.0.1"
    /// 0 binds a free port; the bound address is printed as the first stdout line.
    var port = 8080
    /// A SQLite file's path, or a PostgreSQL database's `postgres://` URL.
    var database = "./fanout.sqlite"
    /// How often subscribers should heartbeat, and how often the server heartbeats to them.
    var heartbeatInterval: Duration = .seconds(5)
    /// A subscriber that sends nothing for this long is dropped.
    var leaseTTL: Duration = .seconds(15)
    /// How many recent events the live ring holds (`--ring-size`): a subscriber further behind
    /// is dropped as too slow.
    var ringSize = 1_024
    var maxSubscribers = 10_000
    /// Cart ids one subscription may name.
    var maxCartsPerSubscription = 100
    /// The operator's key (`--token`): when set, every cart route, `/events`, `/subscribe`,
    /// `/stats` and `/metrics` need a credential, and it opens them all.
    var token: String?
    /// Signed tokens for end users: HS256 with this secret (`--jwt-secret`)…
    var jwtSecret: String?
    /// …and/or verified with this PEM public key or JWKS (the text of `--jwt-key FILE`).
    var jwtKey: String?
    /// Signed tokens must name it in `aud` (`--jwt-audience`).
    var jwtAudience: String?
    /// `Host` names answered besides the loopback ones (see `HostPolicy`).
    var allowedHosts: Set<String> = []
    /// Origins allowed to open WebSockets or send requests from a browser.
    var allowedOrigins: Set<String> = []
    /// Largest WebSocket message accepted (request bodies: `FanoutRequestContext.maxBodySize`).
    var maxMessageSize = 64 * 1024
    var logLevel: Logger.Level = .info
    /// How long a new connection may take to send its first complete request head.
    var firstRequestTimeout: Duration = .seconds(10)
    /// How long a request's body may take to arrive, from its head (see `RequestGuard`).
    var bodyTimeout: Duration = .seconds(30)
    /// Most open connections of any kind; more wait in the listen backlog. `nil`: no limit
    /// (`fanout-server` sets it from the open files limit).
    var maxConnections: Int?
    /// How long a keep-alive HTTP connection may sit idle between requests.
    var idleTimeout: Duration = .seconds(60)
    /// How long a change's `Idempotency-Key` is kept, to answer a repeat (`--idempotency-keys-ttl`).
    var idempotencyKeysTTL: Duration = .seconds(24 * 3600)
    /// The most idempotency keys kept; past it the oldest go (`--idempotency-keys-max`).
    var idempotencyKeysMax = 1_000_000
    /// The most members of one cart's presence (`--presence-max-members`).
    var presenceMaxMembers = 1_000
    /// The most members one user may have on one cart (`--presence-max-members-per-user`).
    var presenceMaxMembersPerUser = 10
    /// TLS on every connection (`--tls-cert`, `--tls-key`): `https://` and `wss://`. `nil`: none,
    /// for loopback or behind a proxy that ends TLS.
    var tls: TLSConfiguration?

    /// `https` with TLS, else `http`: what the server's own origin and URLs start with.
    var scheme: String { tls == nil ? "http" : "https" }
}

extension Duration {
    /// The duration as fractional seconds, for the wire and for logs.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The same duration for NIO's timers.
    var timeAmount: TimeAmount { .nanoseconds(Int64(seconds * 1e9)) }
}

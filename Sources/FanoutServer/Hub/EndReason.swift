import FanoutProtocol

/// Why a subscriber ended: the one vocabulary every ending uses, whatever its transport.
///
/// `Subscriber.end(_:)` records it, counts it in `/stats` (under `name`), and hands it to the
/// transport, which turns it into its own close signal (a WebSocket close code, say).
enum EndReason: Sendable, Hashable {
    /// Its lease lapsed: no sign of life within the lease TTL.
    case leaseExpired
    /// It fell out of the live ring, or (a WebSocket) would be owed more answers to its messages
    /// than `WebSocketTransport.maxAnswersOwed`: it reads too slowly. It resumes from the log
    /// with `since`.
    case tooSlow
    /// The server already has its maximum of subscribers.
    case serverFull
    /// The server is shutting down.
    case shuttingDown
    /// The peer closed the connection, or sent its close.
    case peerClosed
    /// The peer broke the transport's rules.
    case violation(Violation)
    /// The server could not read what the subscriber needed (the store failed).
    case failed
    /// Its signed token expired, and no fresh one was handed over (`refresh`) in time.
    case tokenExpired

    /// What a peer can get wrong, transport-neutral; each transport names its own codes.
    enum Violation: Sendable, Hashable {
        /// A frame the transport's rules forbid (bad opcode, bits, masking, close code).
        case malformedFrame
        /// A message over the size limit.
        case messageTooLarge
        /// A binary message where only JSON text is spoken.
        case binaryMessage
        /// Text that is not valid UTF-8.
        case invalidText
    }

    /// The key under which `/stats` counts it.
    var name: String {
        switch self {
        case .leaseExpired: "leaseExpired"
        case .tooSlow: "tooSlow"
        case .serverFull: "serverFull"
        case .shuttingDown: "shuttingDown"
        case .peerClosed: "peerClosed"
        case .violation: "protocolError"
        case .failed: "failed"
        case .tokenExpired: "tokenExpired"
        }
    }

    /// Every name `/stats` and `/metrics` count under, in this order (one reason for each).
    static let names = [
        EndReason.leaseExpired, .tooSlow, .serverFull, .shuttingDown, .peerClosed, .violation(.malformedFrame), .failed, .tokenExpired,
    ].map(\.name)

    /// What the subscriber is told, with the code that says why (and, on a WebSocket, the close
    /// code that follows), when the server ended it: `resume` names how the client resumes
    /// (`since`, `Last-Event-ID`). Nil when the client ended it, or broke the rules (each
    /// transport says that in its own terms).
    func error(resume: String) -> FanoutError? {
        switch self {
        case .leaseExpired: FanoutError(.leaseExpired, "lease expired: heartbeat more often, and resume with \(resume)")
        case .tooSlow: FanoutError(.tooSlow, "too slow: reconnect and resume with \(resume)")
        case .serverFull: FanoutError(.serverFull, "the server has its maximum of subscribers: retry later")
        case .shuttingDown: FanoutError(.shuttingDown, "the server is shutting down: reconnect later and resume with \(resume)")
        case .failed: FanoutError(.internalError, "the server could not read the event log: reconnect and resume with \(resume)")
        case .tokenExpired: FanoutError(.tokenExpired, "the token expired: reconnect with a fresh one and resume with \(resume)")
        case .peerClosed, .violation: nil
        }
    }
}

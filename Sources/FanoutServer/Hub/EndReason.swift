/// Why a subscriber ended: the one vocabulary every ending uses, whatever its transport.
///
/// `Subscriber.end(_:)` records it, counts it in `/stats` (under `name`), and hands it to the
/// transport, which turns it into its own close signal (a WebSocket close code, say).
enum EndReason: Sendable, Hashable {
    /// Its lease lapsed: no sign of life within the lease TTL.
    case leaseExpired
    /// It fell out of the live ring: it reads too slowly. It resumes from the log with `since`.
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
        }
    }

    static let names = ["leaseExpired", "tooSlow", "serverFull", "shuttingDown", "peerClosed", "protocolError", "failed"]
}

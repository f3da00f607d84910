import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// What a subscriber's connection does for the hub: the only part that differs between
/// transports (WebSocket, Server-Sent Events). Everything else, the filter, the cursor, the lease, catch-up,
/// live fan-out and ending, is `Subscriber`'s, the same for all.
///
/// A transport only writes bytes already framed for it (`framing`), says whether its connection
/// has room, and closes for an `EndReason` in its own terms; it reports "gone" by calling
/// `Subscriber.end(.peerClosed)` (or a violation), and "drained" by calling `LoopFanout.drained`.
/// Every method is called on the subscriber's event loop.
protocol SubscriberTransport: AnyObject {
    /// How this transport frames the shared event bytes.
    var framing: WireFraming { get }
    /// Whether the connection takes more bytes now; when false, live events wait in the ring
    /// (the subscriber's cursor stays) until the transport reports it drained.
    var isWritable: Bool { get }
    /// Queues bytes already framed for this transport.
    func write(_ framed: ByteBuffer)
    /// Sends what was queued.
    func flush()
    /// Queues and sends; the future succeeds once the bytes have left for the peer, and fails
    /// if the connection closes first. The catch-up paces itself on it.
    func writeAndFlush(_ framed: ByteBuffer) -> EventLoopFuture<Void>
    /// Closes the connection for `reason`, saying so in the transport's terms, once.
    func close(for reason: EndReason)
}

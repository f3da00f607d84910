import FanoutProtocol
import NIOCore

/// The life of a subscriber's connection, the same whatever its transport: opened (counted, its
/// unsent bytes bounded, its `Subscriber` registered with the hub and welcomed), drained (the
/// live fan-out carries on), quiesced (the server is stopping), half-closed by the client (its FIN:
/// closed at once), and closed (the subscriber ends, the count goes down). A transport holds one,
/// calls it from its channel events, and keeps only its framing and how it notices "drained" and
/// "gone".
///
/// On the connection's event loop only.
final class SubscriberConnection {
    let hub: FanoutHub
    private let configuration: ServerConfiguration
    /// Once opened: the subscriber, even one the hub refused at once (full, shutting down),
    /// which is then already ended.
    private(set) var subscriber: Subscriber?

    /// The fan-out skips a connection while more than this many bytes wait unsent in it (and
    /// ends it once the ring drops its cursor): bounded memory per connection, however slowly
    /// its client reads.
    static let writeBufferWaterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 16 * 1024, high: 64 * 1024)

    init(hub: FanoutHub, configuration: ServerConfiguration) {
        self.hub = hub
        self.configuration = configuration
    }

    /// The connection is ready for `transport`, admitted with `grant`: counts it, bounds its
    /// unsent bytes and registers its subscriber. Returns the welcome to send, or nil when the
    /// hub refused the subscriber (it has ended, and its transport was told why).
    func open(_ channel: any Channel, for transport: any SubscriberTransport, grant: Grant) -> ServerMessage? {
        hub.connectionOpened()
        try? channel.syncOptions?.setOption(ChannelOptions.writeBufferWaterMark, value: Self.writeBufferWaterMark)
        let subscriber = Subscriber(loop: channel.eventLoop, hub: hub, transport: transport, grant: grant)
        self.subscriber = subscriber
        guard hub.connect(subscriber) else { return nil }
        return .welcome(
            .init(
                subscriberID: subscriber.id,
                heartbeatInterval: configuration.heartbeatInterval.seconds,
                leaseTTL: configuration.leaseTTL.seconds,
                latestSeq: hub.latestSeq,
                databaseID: hub.store.databaseID))
    }

    /// The connection has room again: a live subscriber gets what it missed meanwhile.
    func drained() {
        guard let subscriber else { return }
        subscriber.presenceDrained()
        guard subscriber.phase == .live else { return }
        hub.fanout(for: subscriber.loop).drained()
    }

    /// `channel` saw `event`; returns false when it is not the lifecycle's (for the transport
    /// to handle or pass on).
    func handle(_ event: Any, on channel: any Channel) -> Bool {
        switch event {
        case is ChannelShouldQuiesceEvent:
            // The HTTP server is shutting down.
            subscriber?.end(.shuttingDown)
        case let event as ChannelEvent where event == .inputClosed:
            // The client's FIN. The server allows half-closure (Hummingbird does), so it comes as
            // this event and the channel stays open; a subscriber's client that sends nothing more
            // is gone: closing ends the subscriber now (`closed()`: `peerClosed`), not at a later
            // write.
            channel.close(promise: nil)
        default:
            return false
        }
        return true
    }

    /// The connection is gone: its subscriber ends (if it had not), and it is no longer counted.
    func closed() {
        guard let subscriber else { return }
        subscriber.end(.peerClosed)
        hub.connectionClosed()
        self.subscriber = nil
    }
}

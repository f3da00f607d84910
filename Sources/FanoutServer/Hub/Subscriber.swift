import FanoutProtocol
import Logging
import NIOCore

/// A remote subscriber, whatever its transport: the one model the hub holds.
///
/// Its life: `connected` (registered, its lease running) → `catchingUp` (receiving its snapshot
/// or the log after its cursor, see `Subscriber+CatchUp.swift`) → `live` (served from the
/// `LiveRing` by its event loop's `LoopFanout`) → `ended`, with the reason, through `end(_:)`,
/// the one way out. Its lease (`Subscriber+Lease.swift`) is the networked weak reference: when
/// the peer stops showing signs of life, the subscriber ends as a weak reference goes nil.
///
/// `@unchecked Sendable`: the hub and other threads hold it, but its mutable state is touched on
/// `loop` only (asserted in debug builds); other threads reach it through `end(_:)`, which hops
/// to the loop. Plain stored properties keep the live fan-out's per-event reads to a load.
final class Subscriber: @unchecked Sendable {
    enum Phase: Equatable {
        /// Registered and leased, not yet subscribed (a WebSocket before its `subscribe`).
        case connected
        /// Receiving its snapshot or the log after its cursor, until the ring covers it.
        case catchingUp
        /// Served from the ring by its event loop.
        case live
        case ended(EndReason)
    }

    let id: String
    let loop: any EventLoop
    let hub: FanoutHub
    /// Its transport's framing, kept after the transport is gone: metrics count by transport.
    let framing: WireFraming

    private var _phase = Phase.connected
    private var _carts: Set<String>?
    private var _cursor: Int64 = 0
    private var _transport: (any SubscriberTransport)?
    /// The lease: the last sign of life, and the timer that checks it.
    var leaseRenewedAt: NIODeadline
    var leaseTimer: Scheduled<Void>?
    /// What its credential allows, until when (`Subscriber+Expiry.swift`): its subscription's
    /// carts are decided from it once, and it ends when it expires unless refreshed.
    var grant: Grant
    var expiryTimer: Scheduled<Void>?
    /// Presence (`Subscriber+Presence.swift`): whether it is present on its carts, the carts
    /// whose presence changes it had no room for (it gets their whole presence when it drains),
    /// and when it last changed its state (at most `PresenceLimits.maxStateChangesPerSecond`).
    var isPresent = false
    var presenceBehind: Set<String> = []
    var presenceChanges: [NIODeadline] = []
    /// Which of the heartbeat interval's slices it is heartbeaten in, given by its loop's
    /// fan-out when it goes live (`LoopFanout.heartbeat`).
    var heartbeatSlice = 0

    /// Made on `loop`, with the transport that carries its bytes and what its credential
    /// allows; `hub.connect` registers it.
    init(id: String = Subscriber.newID(), loop: any EventLoop, hub: FanoutHub, transport: any SubscriberTransport, grant: Grant) {
        self.id = id
        self.loop = loop
        self.hub = hub
        self._transport = transport
        self.framing = transport.framing
        self.leaseRenewedAt = loop.now
        self.grant = grant
    }

    var phase: Phase {
        get {
            assertOnLoop()
            return _phase
        }
        set {
            assertOnLoop()
            _phase = newValue
        }
    }

    /// Only events of these carts; `nil` for all. Set once, when it subscribes.
    var carts: Set<String>? {
        get {
            assertOnLoop()
            return _carts
        }
        set {
            assertOnLoop()
            _carts = newValue
        }
    }

    /// The newest seq it was sent, or passed over as another cart's: it gets what follows.
    var cursor: Int64 {
        get {
            assertOnLoop()
            return _cursor
        }
        set {
            assertOnLoop()
            _cursor = newValue
        }
    }

    /// Its connection, until it ends.
    var transport: (any SubscriberTransport)? {
        assertOnLoop()
        return _transport
    }

    var isEnded: Bool {
        if case .ended = phase { return true }
        return false
    }

    func wants(_ cartID: String) -> Bool { carts?.contains(cartID) ?? true }

    /// The one way out: every end of a subscriber comes here, once, from any thread.
    ///
    /// It records the reason, leaves the live fan-out (at once on the loop, so no live frame can
    /// follow the transport's close), leaves the hub, which counts the reason in `/stats`, and
    /// has the transport close for the reason. Later calls do nothing: the first reason wins.
    func end(_ reason: EndReason) {
        guard loop.inEventLoop else {
            loop.execute { self.end(reason) }
            return
        }
        let previous = _phase
        if case .ended = previous { return }
        _phase = .ended(reason)
        leaseTimer?.cancel()
        leaseTimer = nil
        expiryTimer?.cancel()
        expiryTimer = nil
        let transport = _transport
        // Breaks the cycle with the transport, which holds this subscriber.
        _transport = nil
        if previous == .live { hub.fanout(for: loop).remove(self) }
        hub.forget(self, wasIn: previous, because: reason)
        if isPresent { hub.presence.leave(self, because: PresenceLeaveReason(reason)) }
        transport?.close(for: reason)
    }

    @inline(__always)
    private func assertOnLoop() {
        assert(loop.inEventLoop, "a subscriber's state belongs to its event loop")
    }

    static func newID() -> String {
        String(UInt64.random(in: 0...UInt64.max), radix: 36)
    }
}

extension Logger {
    func withSubscriber(_ id: String) -> Logger {
        var logger = self
        logger[metadataKey: "fanout.subscriber.id"] = "\(id)"
        return logger
    }
}

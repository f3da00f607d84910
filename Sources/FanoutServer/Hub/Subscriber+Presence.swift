import FanoutProtocol
import NIOCore

/// Presence, seen from one subscriber: joining with its subscription, changing its state, and
/// taking the presence messages of its carts without ever queueing them.
extension Subscriber {
    /// Subscribes to `carts` after `since` (as `subscribe(carts:since:)`), and, with `presence`,
    /// joins their presence first. Throws, subscribing to nothing, when presence cannot be:
    /// `invalid_presence` (all carts, a bad key), `invalid_presence_state`, `presence_full`.
    func subscribe(carts: Set<String>?, since: Int64?, presence: PresenceRequest?) throws(FanoutError) {
        guard phase == .connected else { return }
        if let presence {
            guard let carts else {
                throw FanoutError(
                    .invalidPresence, "presence needs the carts named: subscribe with carts (a token for all carts names none)")
            }
            try Self.check(presence)
            try hub.presence.join(self, carts: carts, request: presence)
            isPresent = true
        }
        subscribe(carts: carts, since: since)
    }

    /// Changes the state it shows, at most `PresenceLimits.maxStateChangesPerSecond` times a
    /// second.
    func changePresence(to state: PresenceState) throws(FanoutError) {
        guard isPresent else {
            throw FanoutError(.invalidPresence, "this subscription is not present on its carts: subscribe with presence first")
        }
        try PresenceLimits.check(state)
        let now = loop.now
        presenceChanges.removeAll { $0 + .seconds(1) <= now }
        guard presenceChanges.count < PresenceLimits.maxStateChangesPerSecond else {
            throw FanoutError(
                .presenceRateLimited,
                "at most \(PresenceLimits.maxStateChangesPerSecond) state changes a second; this one was not made")
        }
        presenceChanges.append(now)
        try hub.presence.update(self, state: state, at: now)
    }

    /// Hands it a presence message of `cart` (framed for every transport), from any thread: on
    /// its loop, written when its connection has room; otherwise dropped, and the cart's whole
    /// presence sent when it drains.
    func sendPresence(_ frames: [ByteBuffer], cart: String) {
        loop.execute { self.deliverPresence(frames, cart: cart) }
    }

    /// Hands `subscribers` a presence message of `cart`, from any thread: one hop to each of
    /// their loops, not one per subscriber (a join on a cart of a thousand members is a thousand
    /// deliveries).
    static func sendPresence(_ frames: [ByteBuffer], cart: String, to subscribers: some Collection<Subscriber>) {
        var byLoop: [(loop: any EventLoop, subscribers: [Subscriber])] = []
        for subscriber in subscribers {
            if let index = byLoop.firstIndex(where: { $0.loop === subscriber.loop }) {
                byLoop[index].subscribers.append(subscriber)
            } else {
                byLoop.append((subscriber.loop, [subscriber]))
            }
        }
        for (loop, subscribers) in byLoop {
            loop.execute { for subscriber in subscribers { subscriber.deliverPresence(frames, cart: cart) } }
        }
    }

    /// On its loop: writes the message if its connection has room; otherwise marks the cart.
    private func deliverPresence(_ frames: [ByteBuffer], cart: String) {
        guard !isEnded, let transport, !presenceBehind.contains(cart) else { return }
        guard transport.isWritable else {
            presenceBehind.insert(cart)
            return
        }
        transport.write(frames[framing.rawValue])
        transport.flush()
    }

    /// Its connection has room again: the carts whose changes it missed are sent whole.
    func presenceDrained() {
        guard !presenceBehind.isEmpty else { return }
        let carts = presenceBehind
        presenceBehind = []
        for cart in carts.sorted() { hub.presence.resend(cart, to: self) }
    }

    /// Throws `invalid_presence` for a key outside its rules, `invalid_presence_state` for a
    /// state over the limit.
    static func check(_ request: PresenceRequest) throws(FanoutError) {
        if let key = request.key { try PresenceLimits.check(key: key) }
        try PresenceLimits.check(request.state)
    }
}

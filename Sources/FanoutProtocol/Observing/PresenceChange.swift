/// What changed in a cart's presence, told with the cart's members as they are after it
/// (`CartObserver.cartSource(_:didChangePresence:of:change:)`).
public enum PresenceChange: Sendable {
    /// The cart's whole presence, as the server sent it: when the store joined, after each
    /// reconnect, and after the server could not send some changes. It replaces what was held.
    case whole
    /// A member joined.
    case joined(PresenceMember)
    /// A member changed its state (the store's own changes come back too).
    case updated(PresenceMember)
    /// A member left, and why (`closed`: its observer was released or its store closed;
    /// `leaseExpired`: its client vanished).
    case left(PresenceMember.ID, reason: PresenceLeaveReason)
    /// The store follows the cart without presence, and why: the server refused it
    /// (`presence_full`, …), or the store follows every cart (presence needs carts named). The
    /// members are empty; the next connection asks again.
    case unavailable(RemoteStoreError)

    /// The error code of an `unavailable` change (`presence_full`, `invalid_presence`, …).
    public var unavailableCode: FanoutErrorCode? {
        if case .unavailable(let error) = self { error.code } else { nil }
    }
}

extension FanoutErrorCode {
    /// Whether a subscription refused with this code was refused for its presence alone: it
    /// may subscribe again without presence.
    public var refusesPresence: Bool {
        switch self {
        case .invalidPresence, .invalidPresenceState, .presenceFull: true
        default: false
        }
    }
}

import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// Who is on which cart: this server's members (its subscribers with presence), and with
/// PostgreSQL the other servers' (`apply(_:)`, from `PresenceSharing`), and who follows each
/// cart's presence here.
///
/// One lock guards it all; every change is decided under it and its messages handed to their
/// subscribers' loops under it too, so each subscriber gets a cart's changes in the order they
/// were made, after the cart's whole presence it got first. A subscriber that has no room for a
/// change does not queue it: it marks the cart and gets the cart's whole presence again once it
/// drains (`Subscriber.sendPresence`), so nothing here grows with a slow reader.
final class PresenceRegistry: Sendable {
    /// Who holds a member: a subscriber of this server, or another server.
    private enum Holder {
        case local(Subscriber)
        case remote
    }

    private struct Entry {
        var member: PresenceMember
        var holder: Holder
    }

    private struct CartPresence {
        var members: [PresenceMember.ID: Entry] = [:]
        var followers: [ObjectIdentifier: Subscriber] = [:]
        var isEmpty: Bool { members.isEmpty && followers.isEmpty }
    }

    /// A local subscriber's membership: its identity and carts.
    private struct Membership {
        let id: PresenceMember.ID
        let carts: Set<String>
    }

    private struct State {
        var carts: [String: CartPresence] = [:]
        var memberships: [ObjectIdentifier: Membership] = [:]
        /// What the other servers held at their last view.
        var remote: [Key: PresenceMember] = [:]
    }

    /// The most members of one cart (`--presence-max-members`).
    let maxMembers: Int
    /// The other servers, when there are (PostgreSQL): told of every change of this server's
    /// members.
    let sharing: (any PresenceSharing)?
    private let state = NIOLockedValueBox(State())

    init(maxMembers: Int, sharing: (any PresenceSharing)? = nil) {
        self.maxMembers = maxMembers
        self.sharing = sharing
    }

    // MARK: This server's subscribers

    /// Makes `subscriber` a member of `carts` as `request` asks, and a follower of their
    /// presence: the others are told it joined (or, for a key it held already here or on
    /// another server, that its state changed, if it did), and it gets each cart's whole
    /// presence. Throws `presence_full` (and changes nothing) when a cart has `maxMembers`.
    func join(_ subscriber: Subscriber, carts: Set<String>, request: PresenceRequest, at now: Date = Date()) throws(FanoutError) {
        let id = PresenceMember.ID(user: subscriber.grant.subject, member: request.key ?? subscriber.id)
        let outcome: Result<[(String, PresenceMember)], FanoutError> = state.withLockedValue { state in
            for cart in carts.sorted() {
                let presence = state.carts[cart]
                if presence?.members[id] == nil, (presence?.members.count ?? 0) >= maxMembers {
                    return .failure(FanoutError(.presenceFull, "cart \(cart) has its maximum of \(maxMembers) members present"))
                }
            }
            state.memberships[ObjectIdentifier(subscriber)] = Membership(id: id, carts: carts)
            var shared: [(String, PresenceMember)] = []
            for cart in carts.sorted() {
                var presence = state.carts[cart, default: CartPresence()]
                let previous = presence.members[id]
                let member = PresenceMember(
                    user: id.user, member: id.member, state: request.state, since: previous?.member.since ?? now)
                presence.members[id] = Entry(member: member, holder: .local(subscriber))
                presence.followers[ObjectIdentifier(subscriber)] = subscriber
                state.carts[cart] = presence
                if let previous {
                    if previous.member.state != member.state {
                        Self.send(.presenceUpdate(cartID: cart, member: member), to: presence.followers.values, cart: cart)
                    }
                } else {
                    Self.send(
                        .presenceJoin(cartID: cart, member: member), to: presence.followers.values.filter { $0 !== subscriber },
                        cart: cart)
                }
                subscriber.sendPresence(Self.frames(.presence(cartID: cart, members: Self.sorted(presence))), cart: cart)
                shared.append((cart, member))
            }
            return .success(shared)
        }
        for (cart, member) in try outcome.get() { sharing?.set(member, cart: cart) }
    }

    /// Changes the state `subscriber` shows on its carts; its followers (itself included) are
    /// told. Throws `invalid_presence` for a subscriber without presence.
    func update(_ subscriber: Subscriber, state newState: PresenceState) throws(FanoutError) {
        let outcome: Result<[(String, PresenceMember)], FanoutError> = state.withLockedValue { state in
            guard let membership = state.memberships[ObjectIdentifier(subscriber)] else {
                return .failure(
                    FanoutError(.invalidPresence, "this subscription is not present on its carts: subscribe with presence first"))
            }
            var shared: [(String, PresenceMember)] = []
            for cart in membership.carts.sorted() {
                guard var presence = state.carts[cart], var entry = presence.members[membership.id],
                    case .local(let holder) = entry.holder, holder === subscriber
                else { continue }
                guard entry.member.state != newState else { continue }
                entry.member.state = newState
                presence.members[membership.id] = entry
                state.carts[cart] = presence
                Self.send(.presenceUpdate(cartID: cart, member: entry.member), to: presence.followers.values, cart: cart)
                shared.append((cart, entry.member))
            }
            return .success(shared)
        }
        for (cart, member) in try outcome.get() { sharing?.set(member, cart: cart) }
    }

    /// `subscriber` ended: it no longer follows its carts, and the members it held leave, for
    /// `reason`. A member another subscriber (a reconnect with its key) or another server took
    /// over stays: the others see no leave (a state change, if the other's state differs).
    func leave(_ subscriber: Subscriber, because reason: PresenceLeaveReason) {
        let left: [(String, PresenceMember.ID)] = state.withLockedValue { state in
            guard let membership = state.memberships.removeValue(forKey: ObjectIdentifier(subscriber)) else { return [] }
            var left: [(String, PresenceMember.ID)] = []
            for cart in membership.carts.sorted() {
                guard var presence = state.carts[cart] else { continue }
                presence.followers[ObjectIdentifier(subscriber)] = nil
                if let entry = presence.members[membership.id], case .local(let holder) = entry.holder, holder === subscriber {
                    let key = Key(cart: cart, membership.id)
                    if let other = state.remote[key] {
                        // Another server holds it now: it stays, as that server's.
                        presence.members[membership.id] = Entry(member: other, holder: .remote)
                        if other.state != entry.member.state {
                            Self.send(.presenceUpdate(cartID: cart, member: other), to: presence.followers.values, cart: cart)
                        }
                    } else {
                        presence.members[membership.id] = nil
                        Self.send(
                            .presenceLeave(cartID: cart, member: membership.id, reason: reason), to: presence.followers.values,
                            cart: cart)
                    }
                    left.append((cart, membership.id))
                }
                state.carts[cart] = presence.isEmpty ? nil : presence
            }
            return left
        }
        for (cart, id) in left { sharing?.remove(id, cart: cart, reason: reason) }
    }

    /// Sends `subscriber` the whole presence of `cart` (after it dropped a change for want of
    /// room), if it still follows it.
    func resend(_ cart: String, to subscriber: Subscriber) {
        state.withLockedValue { state in
            guard let presence = state.carts[cart], presence.followers[ObjectIdentifier(subscriber)] != nil else { return }
            subscriber.sendPresence(Self.frames(.presence(cartID: cart, members: Self.sorted(presence))), cart: cart)
        }
    }

    /// Who is on `cart` now, on every server, oldest first.
    func members(of cart: String) -> [PresenceMember] {
        state.withLockedValue { state in state.carts[cart].map(Self.sorted) ?? [] }
    }

    // MARK: The other servers

    /// What the other servers hold now: the members new since their last view join, the changed
    /// ones update, and the ones gone leave, each for the reason their server gave
    /// (`departed`), or `node_lost`. A key this server holds itself is this server's to tell.
    func apply(_ view: [Key: PresenceMember], departed: [Key: PresenceLeaveReason]) {
        state.withLockedValue { state in
            let previous = state.remote
            state.remote = view
            for (key, member) in view where previous[key] != member {
                var presence = state.carts[key.cart, default: CartPresence()]
                let existing = presence.members[key.id]
                if let existing, case .local = existing.holder { continue }
                presence.members[key.id] = Entry(member: member, holder: .remote)
                state.carts[key.cart] = presence
                let message: ServerMessage =
                    existing == nil
                    ? .presenceJoin(cartID: key.cart, member: member) : .presenceUpdate(cartID: key.cart, member: member)
                Self.send(message, to: presence.followers.values, cart: key.cart)
            }
            for key in previous.keys where view[key] == nil {
                guard var presence = state.carts[key.cart], let existing = presence.members[key.id], case .remote = existing.holder
                else { continue }
                presence.members[key.id] = nil
                state.carts[key.cart] = presence.isEmpty ? nil : presence
                let reason = departed[key] ?? .nodeLost
                Self.send(.presenceLeave(cartID: key.cart, member: key.id, reason: reason), to: presence.followers.values, cart: key.cart)
            }
        }
    }

    /// Every member this server's subscribers hold, for writing them all again (after the
    /// database was away).
    func localMembers() -> [(cart: String, member: PresenceMember)] {
        state.withLockedValue { state in
            state.carts.flatMap { cart, presence in
                presence.members.values.compactMap { entry in
                    if case .local = entry.holder { (cart, entry.member) } else { nil }
                }
            }
        }
    }

    // MARK: Messages

    private static func sorted(_ presence: CartPresence) -> [PresenceMember] {
        presence.members.values.map(\.member).sorted {
            ($0.since, $0.user ?? "", $0.member) < ($1.since, $1.user ?? "", $1.member)
        }
    }

    /// `message` framed for every transport, once.
    static func frames(_ message: ServerMessage) -> [ByteBuffer] {
        WireFraming.frameForAll(ServerEncoding.message(message))
    }

    private static func send(_ message: ServerMessage, to followers: some Collection<Subscriber>, cart: String) {
        guard !followers.isEmpty else { return }
        Subscriber.sendPresence(frames(message), cart: cart, to: followers)
    }
}

extension PresenceRegistry {
    /// A member's place: its cart and its identity.
    struct Key: Hashable, Sendable {
        let cart: String
        let id: PresenceMember.ID

        init(cart: String, _ id: PresenceMember.ID) {
            self.cart = cart
            self.id = id
        }
    }
}

/// The other servers of the database, for presence: told of every change of this server's
/// members (neither call waits; the sharing writes in the background), and telling `registry`
/// what the others hold (`PresenceRegistry.apply`).
protocol PresenceSharing: Sendable {
    /// The registry the others' views go to, once the hub is made.
    func attach(_ registry: PresenceRegistry)
    func set(_ member: PresenceMember, cart: String)
    func remove(_ id: PresenceMember.ID, cart: String, reason: PresenceLeaveReason)
}

extension PresenceLeaveReason {
    /// The leave a subscriber's end makes.
    init(_ reason: EndReason) {
        switch reason {
        case .leaseExpired: self = .leaseExpired
        case .tokenExpired: self = .tokenExpired
        case .tooSlow: self = .tooSlow
        case .shuttingDown: self = .shuttingDown
        case .peerClosed, .violation, .failed, .serverFull: self = .closed
        }
    }
}

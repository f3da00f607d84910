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
/// drains (`Subscriber.sendPresence`), so nothing here grows with a slow reader. A cart's whole
/// presence is encoded once per change of it, whoever asks for it (`whole`).
///
/// Every change costs a message to each of its cart's followers, so what one user may make is
/// bounded (`Limits`): members per cart, and state changes a second on a cart and on all of a
/// user's subscriptions together. One user with a thousand connections on one cart, each
/// changing its state once a second, once made a million messages a second: the server stopped
/// answering for a minute, and every subscriber's lease lapsed.
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
        var members: [PresenceMember.ID: Entry] = [:] {
            didSet { wholeFrames = nil }
        }
        var followers: [ObjectIdentifier: Subscriber] = [:]
        /// The whole presence as a message, framed for every transport: made once after each
        /// change of the members, for every follower that needs it (`whole`).
        var wholeFrames: [ByteBuffer]?
        /// The state changes of the current second, all members together.
        var changes = ChangeWindow()
        var isEmpty: Bool { members.isEmpty && followers.isEmpty }
    }

    /// The changes made in one second, counted from the first: a fixed window, so a burst at
    /// a window's end and another at the next one's start pass twice the rate at most.
    struct ChangeWindow {
        var start: NIODeadline = .uptimeNanoseconds(0)
        var count = 0

        /// Counts one more change at `now`, unless `limit` were made in its second already.
        mutating func take(at now: NIODeadline, limit: Int) -> Bool {
            if now - start >= .seconds(1) {
                start = now
                count = 0
            }
            guard count < limit else { return false }
            count += 1
            return true
        }

        /// Whether its second is over (nothing to keep).
        func isOver(at now: NIODeadline) -> Bool { now - start >= .seconds(1) }
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
        /// Each user's state changes in the current second (users with a change in the last
        /// second only: the others are dropped as changes come).
        var userChanges: [String: ChangeWindow] = [:]
        /// When `userChanges` was last rid of windows that are over: at most once a second, so
        /// that a thousand users busy at once do not each walk all the others' windows.
        var userChangesPruned: NIODeadline = .uptimeNanoseconds(0)
    }

    /// What the members of one cart, and of one user, may do.
    struct Limits: Sendable {
        /// The most members of one cart (`--presence-max-members`).
        var maxMembers = 1_000
        /// The most members one user (a signed token's `sub`) may have on one cart
        /// (`--presence-max-members-per-user`); anonymous members count to the cart's limit only.
        var maxMembersPerUser = 10
        /// The most state changes a second on one cart, all its members together.
        var maxCartChangesPerSecond = PresenceLimits.maxCartStateChangesPerSecond
        /// The most presence messages a second a cart's changes may make (a change makes one
        /// per follower): a cart of many followers takes fewer changes a second, at least one.
        var maxCartDeliveriesPerSecond = PresenceLimits.maxCartStateDeliveriesPerSecond

        /// The most state changes a second on a cart that `followers` follow.
        func maxCartChanges(followers: Int) -> Int {
            min(maxCartChangesPerSecond, max(1, maxCartDeliveriesPerSecond / max(1, followers)))
        }
        /// The most state changes a second by one user, all its subscriptions together.
        var maxUserChangesPerSecond = PresenceLimits.maxUserStateChangesPerSecond
    }

    let limits: Limits
    var maxMembers: Int { limits.maxMembers }
    /// The other servers, when there are (PostgreSQL): told of every change of this server's
    /// members.
    let sharing: (any PresenceSharing)?
    private let state = NIOLockedValueBox(State())

    init(limits: Limits = Limits(), sharing: (any PresenceSharing)? = nil) {
        self.limits = limits
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
            if let refusal = Self.refusal(joining: carts, as: id, in: state, limits: limits) { return .failure(refusal) }
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
                subscriber.sendPresence(Self.whole(cart, &presence), cart: cart)
                state.carts[cart] = presence
                shared.append((cart, member))
            }
            return .success(shared)
        }
        for (cart, member) in try outcome.get() { sharing?.set(member, cart: cart) }
    }

    /// Why a member `user` keyed `key` (nil: a new key) could not join `carts` now, if it could
    /// not: what an event stream answers (409 `presence_full`) before it starts. A join may
    /// still be refused later, when the cart fills meanwhile.
    /// Members on the carts this server follows: held by its own subscribers, and by other
    /// servers' (one a cart: a member on two carts counts twice).
    func memberCounts() -> (here: Int, elsewhere: Int) {
        state.withLockedValue { state in
            var here = 0
            var elsewhere = 0
            for presence in state.carts.values {
                for entry in presence.members.values {
                    if case .local = entry.holder { here += 1 } else { elsewhere += 1 }
                }
            }
            return (here, elsewhere)
        }
    }

    func refusal(joining carts: Set<String>, user: String?, key: String?) -> FanoutError? {
        // Without a key the member is new: a key no member can hold yet.
        let id = PresenceMember.ID(user: user, member: key ?? "")
        return state.withLockedValue { Self.refusal(joining: carts, as: id, in: $0, limits: limits) }
    }

    private static func refusal(joining carts: Set<String>, as id: PresenceMember.ID, in state: State, limits: Limits) -> FanoutError? {
        for cart in carts.sorted() {
            guard let presence = state.carts[cart], presence.members[id] == nil else { continue }
            if presence.members.count >= limits.maxMembers {
                return FanoutError(.presenceFull, "cart \(cart) has its maximum of \(limits.maxMembers) members present")
            }
            if let user = id.user, presence.members.keys.lazy.filter({ $0.user == user }).count >= limits.maxMembersPerUser {
                return FanoutError(
                    .presenceFull, "this user has its maximum of \(limits.maxMembersPerUser) members present on cart \(cart)")
            }
        }
        return nil
    }

    /// Changes the state `subscriber` shows on its carts; its followers (itself included) are
    /// told. Throws `invalid_presence` for a subscriber without presence, and
    /// `presence_rate_limited` (changing nothing) past a cart's or its user's changes a second.
    func update(_ subscriber: Subscriber, state newState: PresenceState, at now: NIODeadline = .now()) throws(FanoutError) {
        let limits = self.limits
        let outcome: Result<[(String, PresenceMember)], FanoutError> = state.withLockedValue { state in
            guard let membership = state.memberships[ObjectIdentifier(subscriber)] else {
                return .failure(
                    FanoutError(.invalidPresence, "this subscription is not present on its carts: subscribe with presence first"))
            }
            if let refusal = Self.takeChange(by: membership, in: &state, at: now, limits: limits) { return .failure(refusal) }
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

    /// Counts a state change by `membership` against its carts' and its user's second, or says
    /// why it may not be made (and counts nothing).
    private static func takeChange(by membership: Membership, in state: inout State, at now: NIODeadline, limits: Limits) -> FanoutError? {
        for cart in membership.carts.sorted() {
            var probe = state.carts[cart]?.changes ?? ChangeWindow()
            let limit = limits.maxCartChanges(followers: state.carts[cart]?.followers.count ?? 0)
            guard probe.take(at: now, limit: limit) else {
                return FanoutError(
                    .presenceRateLimited,
                    "cart \(cart) takes at most \(limit) state changes a second now, all its members together (each goes to its \(state.carts[cart]?.followers.count ?? 0) followers); this one was not made"
                )
            }
        }
        if let user = membership.id.user {
            var window = state.userChanges[user] ?? ChangeWindow()
            guard window.take(at: now, limit: limits.maxUserChangesPerSecond) else {
                return FanoutError(
                    .presenceRateLimited,
                    "a user makes at most \(limits.maxUserChangesPerSecond) state changes a second, all its subscriptions together; this one was not made"
                )
            }
            if state.userChanges.count >= 1_024, state.userChanges[user] == nil, now - state.userChangesPruned >= .seconds(1) {
                state.userChanges = state.userChanges.filter { !$0.value.isOver(at: now) }
                state.userChangesPruned = now
            }
            state.userChanges[user] = window
        }
        for cart in membership.carts {
            _ = state.carts[cart]?.changes.take(at: now, limit: .max)
        }
        return nil
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
            guard var presence = state.carts[cart], presence.followers[ObjectIdentifier(subscriber)] != nil else { return }
            subscriber.sendPresence(Self.whole(cart, &presence), cart: cart)
            state.carts[cart] = presence
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

    /// The whole presence of `cart` as a message framed for every transport: the one made since
    /// its members last changed, or made now and kept.
    private static func whole(_ cart: String, _ presence: inout CartPresence) -> [ByteBuffer] {
        if let frames = presence.wholeFrames { return frames }
        let frames = Self.frames(.presence(cartID: cart, members: sorted(presence)))
        presence.wholeFrames = frames
        return frames
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

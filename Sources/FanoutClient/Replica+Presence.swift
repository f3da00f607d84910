import FanoutProtocol

/// Presence, as a `RemoteCartStore` made with it holds and tells it: each cart's members as the
/// server sent them, kept current by joins, updates and leaves, and told to the observers loaded
/// with the cart.
extension Replica {
    /// A connection is being made for `plan`: presence of carts it no longer has is forgotten,
    /// and a plan without presence (the store follows every cart) is said to be one.
    func connecting(_ plan: FanoutSubscription.Plan, observers: RemoteCartStore.Observers) {
        guard state.presenceWanted else { return }
        if let carts = plan.carts.map(Set.init) { state.presence = state.presence.filter { carts.contains($0.key) } }
        guard plan.presence == nil else { return }
        let error = RemoteStoreError.invalid(
            FanoutError(
                .invalidPresence,
                "presence needs the carts named: with an observer of every cart (CartSelection.all) the store follows them all, without presence"
            ))
        presenceUnavailable(error, observers: observers)
    }

    /// The store is without presence, for `error`: the observers loaded with named carts are
    /// told (once, until presence comes back), with no members.
    func presenceUnavailable(_ error: RemoteStoreError, observers: RemoteCartStore.Observers) {
        guard state.presenceWanted else { return }
        let wasAvailable = state.presenceProblem == nil
        state.presenceProblem = error
        state.presence = [:]
        guard wasAvailable, let store = store.withLockedValue(\.store) else { return }
        observers.registry.notify(where: \.isLoaded) { observer, interest in
            guard case .carts(let ids) = interest.selection else { return }
            for id in ids.sorted() { observer.cartSource(store, didChangePresence: [], of: id, change: .unavailable(error)) }
        }
    }

    /// Applies one presence message of a cart the replica covers, and tells its observers.
    func applyPresence(_ message: ServerMessage, observers: RemoteCartStore.Observers) {
        let cartID: String
        let change: PresenceChange
        switch message {
        case .presence(let cart, let members):
            (cartID, change) = (cart, .whole)
            state.presenceProblem = nil
            state.presence[cart] = members.sorted { $0.since < $1.since }
        case .presenceJoin(let cart, let member):
            (cartID, change) = (cart, .joined(member))
            state.presence[cart, default: []].upsert(member)
        case .presenceUpdate(let cart, let member):
            (cartID, change) = (cart, .updated(member))
            state.presence[cart, default: []].upsert(member)
        case .presenceLeave(let cart, let id, let reason):
            (cartID, change) = (cart, .left(id, reason: reason))
            state.presence[cart]?.removeAll { $0.id == id }
        default:
            return
        }
        guard state.presenceWanted, state.covered?.contains(cartID) == true else {
            state.presence[cartID] = nil
            return
        }
        guard let store = store.withLockedValue(\.store) else { return }
        let members = state.presence[cartID] ?? []
        observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
            observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
        }
    }

    /// What an observer of `selection` is told of presence right after its carts' state. Under
    /// the lock.
    func presence(of selection: CartSelection) -> [(String, [PresenceMember], PresenceChange)] {
        Self.presence(of: selection, in: state.presence, problem: state.presenceWanted ? state.presenceProblem : nil)
    }

    /// The presence known of each named cart of `selection` (`whole`), or, when the store is
    /// without presence, why (`unavailable`).
    static func presence(of selection: CartSelection, in presence: [String: [PresenceMember]], problem: RemoteStoreError?)
        -> [(String, [PresenceMember], PresenceChange)]
    {
        guard case .carts(let ids) = selection else { return [] }
        return ids.sorted().compactMap { id in
            if let problem { return (id, [], .unavailable(problem)) }
            return presence[id].map { (id, $0, .whole) }
        }
    }
}

extension [PresenceMember] {
    /// Puts `member` in place of the one with its identity, or adds it, oldest first.
    fileprivate mutating func upsert(_ member: PresenceMember) {
        if let index = firstIndex(where: { $0.id == member.id }) {
            self[index] = member
        } else {
            append(member)
            sort { $0.since < $1.since }
        }
    }
}

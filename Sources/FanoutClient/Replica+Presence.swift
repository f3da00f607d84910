import FanoutProtocol

/// Presence, as a `RemoteCartStore` made with it holds and tells it: each cart's members as the
/// server sent them, kept current by joins, updates and leaves, and told to the observers loaded
/// with the cart.
extension Replica {
    /// A connection is being made for `plan`: presence of carts it no longer has is forgotten,
    /// and a plan without presence (the store follows every cart) is said to be one.
    func connecting(_ plan: FanoutSubscription.Plan, observers: RemoteCartStore.Observers) {
        guard state.presence.wanted else { return }
        if let carts = plan.carts.map(Set.init) { state.presence.keep(only: carts) }
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
        guard state.presence.wanted, state.presence.unavailable(error), let store = store.withLockedValue(\.store) else { return }
        observers.registry.notify(where: \.isLoaded) { observer, interest in
            guard case .carts(let ids) = interest.selection else { return }
            for id in ids.sorted() { observer.cartSource(store, didChangePresence: [], of: id, change: .unavailable(error)) }
        }
    }

    /// Applies one presence message of a cart the replica covers, and tells its observers.
    func applyPresence(_ message: ServerMessage, observers: RemoteCartStore.Observers) {
        guard let (cartID, change) = state.presence.apply(message) else { return }
        guard state.presence.wanted, state.held.covered?.contains(cartID) == true else {
            state.presence.forget(cartID)
            return
        }
        guard let store = store.withLockedValue(\.store) else { return }
        let members = state.presence.members[cartID] ?? []
        observers.registry.notify(where: { $0.isLoaded && $0.selection.contains(cartID) }) { observer, _ in
            observer.cartSource(store, didChangePresence: members, of: cartID, change: change)
        }
    }
}

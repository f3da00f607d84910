/// What a `RemoteCartStore`'s subscription loop is doing, against what its observers want: the
/// one place that decides whether the loop must be woken to plan again.
///
/// The loop and the observers change it from different threads, in any order: the store is
/// made (the loop is `starting`), its cache restored, the loop plans (`planning`, then `idle`
/// with nothing to follow or `following` some carts), observers are added and released, the
/// server comes and goes. After every change of either side the store asks `wake(toFollow:)`
/// with what the living observers want (without the carts the server refused); it answers yes
/// exactly when the loop would otherwise go on with something else:
///
/// | loop | woken when |
/// | --- | --- |
/// | `starting` | never: its first plan reads what is wanted then |
/// | `planning(read)` | what is wanted is no longer `read` (the plan's connection is then cut short at once) |
/// | `idle` | anything is wanted |
/// | `following(carts)` | what is wanted is not `carts` |
///
/// and, in every state but `starting`, when a refusal is old enough to ask again. At most one
/// wake-up is asked for between two plans (`woken`): the loop reads everything anew when it
/// plans. Carts restored from a cache file are not followed by anything until a plan says so:
/// that they are held (`Replica.State.covered`) never stands in for a connection.
package struct SubscriptionDemand: Equatable, Sendable {
    /// The loop's state, as its last transition left it.
    package enum Loop: Equatable, Sendable {
        /// Made, and not yet planning: the first plan reads the observers when it starts.
        case starting
        /// Making a plan from what was wanted when it began (nil: nothing).
        case planning(CartSelection?)
        /// Nothing to follow: waiting to be woken.
        case idle
        /// A connection (or the pause before the next attempt) for these carts.
        case following(CartSelection)
    }

    package private(set) var loop = Loop.starting
    /// A wake-up was asked for since the loop last began a plan.
    private(set) var woken = false

    /// The loop begins a plan, for `wanted` (what the observers want, refusals left out).
    mutating func beginPlanning(_ wanted: CartSelection?) {
        loop = .planning(Self.followable(wanted))
        woken = false
    }

    /// The loop's plan is made: a connection for `carts`, or nothing (nil) until woken.
    mutating func planned(_ carts: CartSelection?) {
        loop = Self.followable(carts).map(Loop.following) ?? .idle
    }

    /// Whether the loop must be woken (and plan again) so that it follows `wanted`; true once
    /// until the loop plans again.
    ///
    /// - Parameters:
    ///   - wanted: what the living observers want together, without the carts the server
    ///     refused; nil (or no carts) when nothing is.
    ///   - refusalExpired: a refusal is old enough to be asked again.
    mutating func wake(toFollow wanted: CartSelection?, refusalExpired: Bool = false) -> Bool {
        guard !woken else { return false }
        let target = Self.followable(wanted)
        let needed: Bool
        switch loop {
        case .starting: needed = false
        case .planning(let read): needed = read != target || refusalExpired
        case .idle: needed = target != nil || refusalExpired
        case .following(let carts): needed = carts != target || refusalExpired
        }
        if needed { woken = true }
        return needed
    }

    /// Whether `wake(toFollow:)` can answer yes at all: not before the first plan, nor once a
    /// wake-up is asked for. Callers skip computing what is wanted (a walk over every observer)
    /// when it cannot: a thousand observers added in a row then cost one walk, not a thousand.
    var mayWake: Bool { !woken && loop != .starting }

    /// No carts to follow is nothing to follow: no connection.
    private static func followable(_ selection: CartSelection?) -> CartSelection? {
        selection == .carts([]) ? nil : selection
    }
}

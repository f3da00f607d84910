import FanoutProtocol
import Synchronization
import WeakObservers

/// Renamed: a `RemoteCartStore`'s observers are `CartObserver`s, as a `CartStore`'s are, with
/// callbacks `cartSource(_:didLoad:)`, `cartSource(_:didApply:to:)`, …
@available(*, unavailable, renamed: "CartObserver", message: "callbacks are now cartSource(_:didLoad:), cartSource(_:didApply:to:), …")
public typealias RemoteCartObserver = CartObserver

/// Renamed: a main-actor observer of either store is a `MainActorCartObserver`.
@available(
    *, unavailable, renamed: "MainActorCartObserver", message: "callbacks are now cartSource(_:didLoad:), cartSource(_:didApply:to:), …"
)
public typealias MainActorRemoteCartObserver = MainActorCartObserver

/// One observer's registration details: what it wants, and whether it was told the current
/// state yet (until then it gets no event).
package final class ObserverInterest: Sendable {
    package let selection: CartSelection
    private let loaded = Atomic<Bool>(false)

    package init(_ selection: CartSelection) {
        self.selection = selection
    }

    package var isLoaded: Bool { loaded.load(ordering: .acquiring) }

    package func markLoaded() { loaded.store(true, ordering: .releasing) }
}

/// How the store's `WeakObserverSet` holds a `CartObserver`, with its interest.
package typealias WeakRemoteCartObserver = WeakCartObserver<ObserverInterest>

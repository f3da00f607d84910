import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// A set of observers held weakly: the multicast delegate of iOS apps, done natively for Linux.
///
/// Generic over how one observer is held (`WeakObserverReference`): Swift cannot declare a
/// `weak` property of a generic type, even one that will be a class-bound protocol's existential,
/// so each set's reference is a small struct of its own. CartStore's `WeakCartStoreObserver` is
/// a `weak var` of its protocol's type; a `CartObserver` is held through FanoutProtocol's
/// `CartObserverHold` (weakly, or a main-actor observer's relay strongly while its target
/// lives), in one generic struct, `WeakCartObserver<Interest>`, whose `Interest` is what each
/// store keeps per observer. `CartStore.observers` holds two of these sets (its `CartStoreObserver`s and its
/// `CartObserver`s), FanoutClient's `RemoteCartStore.observers` one.
///
/// An observer that is released drops out by itself; nobody has to unregister it. Explicit
/// `remove` also works, and once it returns the observer gets no further callback, not even one
/// already queued on its delivery queue.
///
/// Each observer may name a serial `DispatchQueue` for its deliveries; without one it is called
/// synchronously on the notifying thread (or, for a set made with `DeferredCalls`, once the
/// notifying thread has released its owner's lock). Observers can be added and removed from any thread,
/// including from inside their own callbacks: a notification works on a snapshot of the set
/// taken when it starts, so a callback that changes the set affects the next notification.
///
/// Costs: `add` and `remove` are O(1) amortised (a dictionary from object identity to a dense
/// array slot, and swap-remove); a notification is one lock acquisition plus one weak load per
/// observer. A change made while a notification holds the snapshot copies the array once; later
/// changes before the next notification are O(1) again. Dead observers found while notifying are
/// swept after the notification, so they cost nothing afterwards.
public final class WeakObserverSet<Reference: WeakObserverReference>: Sendable {
    public typealias Observer = Reference.Observer

    /// One registration. A class, so that `remove` can mark it dead for snapshots and queued
    /// deliveries that still hold it.
    final class Registration: Sendable {
        let reference: Reference
        let queue: DispatchQueue?
        let id: ObjectIdentifier
        /// What the observer asked for when it was added (`Void` for a set without a filter).
        let interest: Reference.Interest
        let isRemoved = Atomic<Bool>(false)
        /// Held while the observer is being called, so that `remove` can wait for a call under
        /// way on another thread. Recursive, so that an observer may remove itself (or be removed
        /// by a callback it triggers) from inside its own callback. An exception to
        /// `NIOLockedValueBox`, which cannot be re-entered.
        let calling = NSRecursiveLock()

        init(_ observer: Observer, queue: DispatchQueue?, interest: Reference.Interest) {
            self.reference = Reference(observer)
            self.queue = queue
            self.id = Reference.identity(of: observer)
            self.interest = interest
        }

        @inline(__always)
        var observer: Observer? { reference.observer }

        /// The observer, if it is still alive and registered.
        @inline(__always)
        var liveObserver: Observer? {
            guard !isRemoved.load(ordering: .acquiring) else { return nil }
            return observer
        }

        /// Calls `body` with the observer unless it was removed: the check and the call are one
        /// step for `remove`, which waits for it.
        @inline(__always)
        func call(_ observer: Observer, _ body: (Observer) throws -> Void) rethrows {
            calling.lock()
            defer { calling.unlock() }
            guard !isRemoved.load(ordering: .acquiring) else { return }
            try body(observer)
        }

        /// Marks it removed, then waits for a call under way on another thread to return.
        func removeAndWait() {
            isRemoved.store(true, ordering: .releasing)
            calling.lock()
            calling.unlock()
        }
    }

    struct State {
        var registrations: [Registration] = []
        var slotByID: [ObjectIdentifier: Int] = [:]

        mutating func remove(at index: Int) {
            let removed = registrations[index]
            removed.isRemoved.store(true, ordering: .releasing)
            slotByID[removed.id] = nil
            let last = registrations.count - 1
            if index != last {
                registrations.swapAt(index, last)
                slotByID[registrations[index].id] = index
            }
            registrations.removeLast()
        }

        /// Removes every registration whose observer is gone. O(n).
        mutating func sweep() {
            var index = 0
            while index < registrations.count {
                if registrations[index].observer == nil {
                    remove(at: index)
                } else {
                    index += 1
                }
            }
        }
    }

    private let state = NIOLockedValueBox(State())
    /// Where synchronous deliveries go when the set's owner notifies under a lock of its own.
    private let deferred: DeferredCalls?

    public init() {
        deferred = nil
    }

    /// A set whose synchronous deliveries (observers added without a queue) are appended to
    /// `calls` rather than made: its owner notifies under its lock and runs `calls` once the lock
    /// is released. Deliveries on a queue are dispatched as usual.
    public init(deferringCallsTo calls: DeferredCalls) {
        deferred = calls
    }

    /// Adds `observer`, held weakly. Adding an observer that is already in the set replaces its
    /// delivery queue; it is never notified twice.
    ///
    /// - Parameter queue: a serial queue to deliver on, in order; `nil` delivers synchronously.
    public func add(_ observer: Observer, queue: DispatchQueue? = nil) where Reference.Interest == Void {
        add(observer, queue: queue, interest: ())
    }

    /// Adds `observer` with what it is interested in: `notify` hands each observer's interest to
    /// its caller, who decides.
    public func add(_ observer: Observer, queue: DispatchQueue? = nil, interest: Reference.Interest) {
        let registration = Registration(observer, queue: queue, interest: interest)
        state.withLockedValue { state in
            if let index = state.slotByID[registration.id] {
                // Same identity: either this observer again, or a new object at the address of a
                // dead one. Either way the old registration is over.
                state.registrations[index].isRemoved.store(true, ordering: .releasing)
                state.registrations[index] = registration
            } else {
                state.slotByID[registration.id] = state.registrations.count
                state.registrations.append(registration)
            }
        }
    }

    /// Removes `observer`. After this returns it receives no further callbacks: not one queued
    /// on its delivery queue, and not one that another thread was about to make. A callback
    /// already running on another thread is waited for (so do not remove an observer while
    /// holding something its callback waits on); one running on this thread, the observer
    /// removing itself from its own callback, is not.
    public func remove(_ observer: Observer) {
        let id = Reference.identity(of: observer)
        let removed: Registration? = state.withLockedValue { state in
            guard let index = state.slotByID[id] else { return nil }
            defer { state.remove(at: index) }
            return state.registrations[index]
        }
        // Outside the set's lock: the callback waited for may itself change the set.
        removed?.removeAndWait()
    }

    /// Whether `observer` is in the set.
    public func contains(_ observer: Observer) -> Bool {
        state.withLockedValue { state in
            let id = Reference.identity(of: observer)
            guard let index = state.slotByID[id], let current = state.registrations[index].observer else { return false }
            return Reference.identity(of: current) == id
        }
    }

    /// The number of live observers. Sweeps released ones first, so it is O(n).
    public var count: Int {
        state.withLockedValue { state in
            state.sweep()
            return state.registrations.count
        }
    }

    /// Calls `body` for every live observer: synchronously, or on the observer's queue.
    ///
    /// Observers with a queue are called later, in the order of `notify` calls; the observer is
    /// skipped if it was released or removed by then.
    public func notify(_ body: @escaping @Sendable (Observer) -> Void) {
        notify(where: { _ in true }) { observer, _ in body(observer) }
    }

    /// Calls `body` for every live observer whose interest `include` accepts, as `notify(_:)`,
    /// with that interest. `include` runs now, on this thread, once per registration.
    public func notify(
        where include: (Reference.Interest) -> Bool, _ body: @escaping @Sendable (Observer, Reference.Interest) -> Void
    ) {
        notify(choosing: { include($0) ? $0 : nil }, body)
    }

    /// Calls `body` for every live observer for which `choose` gives a value, as `notify(_:)`,
    /// with that value: what each one is told may differ (its own view of a change). `choose`
    /// runs now, on this thread, once per registration, in the set's order.
    public func notify<Value: Sendable>(
        choosing choose: (Reference.Interest) -> Value?, _ body: @escaping @Sendable (Observer, Value) -> Void
    ) {
        let registrations = snapshot()
        /// The synchronous deliveries of a set that defers them: one call for all of them,
        /// appended once (a closure and two locks per observer cost more than the call).
        var deferredCalls: [(Registration, Value)] = []
        // Iterating the buffer borrows each registration instead of retaining it: with weak
        // loads already the bulk of a delivery, that retain/release pair is worth avoiding.
        let sawDead = registrations.withUnsafeBufferPointer { buffer in
            var sawDead = false
            for registration in buffer {
                guard let value = choose(registration.interest) else { continue }
                guard let observer = registration.liveObserver else {
                    sawDead = true
                    continue
                }
                if deferred != nil, registration.queue == nil {
                    deferredCalls.append((registration, value))
                } else {
                    deliver(value, to: registration, observer, body)
                }
            }
            return sawDead
        }
        if let deferred, !deferredCalls.isEmpty {
            deferred.append { [deferredCalls] in
                for (registration, value) in deferredCalls {
                    if let observer = registration.liveObserver {
                        registration.call(observer) { body($0, value) }
                    }
                }
            }
        }
        if sawDead {
            sweep()
        }
    }

    /// Calls `body` for `observer` alone, as `notify` would (on its queue, in order with the
    /// notifications before and after): a newcomer's first state, say. Nothing if it is not in
    /// the set, or if `include` refuses the interest it was added with (a registration that
    /// was replaced since).
    public func notify(
        only observer: Observer, where include: (Reference.Interest) -> Bool = { _ in true },
        _ body: @escaping @Sendable (Observer) -> Void
    ) {
        let id = Reference.identity(of: observer)
        let registration = state.withLockedValue { state in state.slotByID[id].map { state.registrations[$0] } }
        guard let registration, include(registration.interest), let live = registration.liveObserver else { return }
        deliver((), to: registration, live) { observer, _ in body(observer) }
    }

    /// The interest `observer` was added with, while it is alive and in the set.
    public func interest(of observer: Observer) -> Reference.Interest? {
        let id = Reference.identity(of: observer)
        return state.withLockedValue { state in
            guard let index = state.slotByID[id], state.registrations[index].liveObserver != nil else { return nil }
            return state.registrations[index].interest
        }
    }

    /// Calls `body` with `value` for one registration, now, on its queue, or once its owner's
    /// lock is released (`deferred`). Generic over the value rather than wrapping `body` in a
    /// closure of its own: a synchronous delivery then allocates nothing.
    @inline(__always)
    private func deliver<Value: Sendable>(
        _ value: Value, to registration: Registration, _ observer: Observer, _ body: @escaping @Sendable (Observer, Value) -> Void
    ) {
        if let queue = registration.queue {
            queue.async {
                if let observer = registration.liveObserver {
                    registration.call(observer) { body($0, value) }
                }
            }
        } else if let deferred {
            deferred.append {
                if let observer = registration.liveObserver {
                    registration.call(observer) { body($0, value) }
                }
            }
        } else {
            registration.call(observer) { body($0, value) }
        }
    }

    /// The interests of the live observers (released ones are swept first).
    public var interests: [Reference.Interest] {
        state.withLockedValue { state in
            state.sweep()
            return state.registrations.map(\.interest)
        }
    }

    /// Calls `body` synchronously for every live observer, ignoring delivery queues, stopping at
    /// the first error. Used for validation, which must answer before a transaction commits.
    public func forEachNow(_ body: (Observer) throws -> Void) rethrows {
        for registration in snapshot() {
            if let observer = registration.liveObserver {
                try registration.call(observer, body)
            }
        }
    }

    private func snapshot() -> [Registration] {
        state.withLockedValue { $0.registrations }
    }

    private func sweep() {
        state.withLockedValue { $0.sweep() }
    }
}

/// How a `WeakObserverSet` holds one observer: a struct with a `weak var` of the observer
/// protocol's existential, which only the protocol's own module can write:
///
/// ```swift
/// public struct WeakCartStoreObserver: WeakObserverReference {
///     public weak var observer: (any CartStoreObserver)?
///     public init(_ observer: any CartStoreObserver) { self.observer = observer }
///     public static func identity(of observer: any CartStoreObserver) -> ObjectIdentifier { ObjectIdentifier(observer) }
/// }
/// ```
public protocol WeakObserverReference: Sendable {
    associatedtype Observer
    /// What an observer says it wants when it is added; `Void` when every observer gets every
    /// notification.
    associatedtype Interest: Sendable = Void
    init(_ observer: Observer)
    /// The observer, or nil once it was released.
    var observer: Observer? { get }
    /// The observer object's identity.
    static func identity(of observer: Observer) -> ObjectIdentifier
}

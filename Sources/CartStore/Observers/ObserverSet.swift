import Dispatch
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// A set of observers held weakly: the multicast delegate of iOS apps, done natively for Linux.
///
/// An observer that is released drops out by itself; nobody has to unregister it. Explicit
/// `remove` also works, and once it returns the observer gets no further callback, not even one
/// already queued on its delivery queue.
///
/// Each observer may name a serial `DispatchQueue` for its deliveries; without one it is called
/// synchronously on the notifying thread. Observers can be added and removed from any thread,
/// including from inside their own callbacks: a notification works on a snapshot of the set
/// taken when it starts, so a callback that changes the set affects the next notification.
///
/// Costs: `add` and `remove` are O(1) amortised (a dictionary from object identity to a dense
/// array slot, and swap-remove); a notification is one lock acquisition plus one weak load per
/// observer. A change made while a notification holds the snapshot copies the array once; later
/// changes before the next notification are O(1) again. Dead observers found while notifying are
/// swept after the notification, so they cost nothing afterwards.
public final class ObserverSet: Sendable {
    /// Swift cannot hold a protocol existential weakly through a generic parameter, so the set
    /// is specific to the store's observer protocol.
    public typealias Observer = any CartStoreObserver

    /// One registration. A class, so that `remove` can mark it dead for snapshots and queued
    /// deliveries that still hold it.
    final class Registration: Sendable {
        weak let observer: Observer?
        let queue: DispatchQueue?
        let id: ObjectIdentifier
        let isRemoved = Atomic<Bool>(false)
        /// Held while the observer is being called, so that `remove` can wait for a call under
        /// way on another thread. Recursive, so that an observer may remove itself (or be removed
        /// by a callback it triggers) from inside its own callback. The package's one exception to
        /// `NIOLockedValueBox`, which cannot be re-entered.
        let calling = NSRecursiveLock()

        init(_ observer: Observer, queue: DispatchQueue?) {
            self.observer = observer
            self.queue = queue
            self.id = ObjectIdentifier(observer)
        }

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

    public init() {}

    /// Adds `observer`, held weakly. Adding an observer that is already in the set replaces its
    /// delivery queue; it is never notified twice.
    ///
    /// - Parameter queue: a serial queue to deliver on, in order; `nil` delivers synchronously.
    public func add(_ observer: Observer, queue: DispatchQueue? = nil) {
        let registration = Registration(observer, queue: queue)
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
        let id = ObjectIdentifier(observer)
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
            guard let index = state.slotByID[ObjectIdentifier(observer)] else { return false }
            return state.registrations[index].observer === observer
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
        let registrations = snapshot()
        // Iterating the buffer borrows each registration instead of retaining it: with weak
        // loads already the bulk of a delivery, that retain/release pair is worth avoiding.
        let sawDead = registrations.withUnsafeBufferPointer { buffer in
            var sawDead = false
            for registration in buffer {
                guard let observer = registration.liveObserver else {
                    sawDead = true
                    continue
                }
                if let queue = registration.queue {
                    queue.async {
                        if let observer = registration.liveObserver {
                            registration.call(observer, body)
                        }
                    }
                } else {
                    registration.call(observer, body)
                }
            }
            return sawDead
        }
        if sawDead {
            sweep()
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

import NIOCore
import Synchronization

/// The live subscribers of one event loop, and the pass that writes them what the ring holds
/// for them.
///
/// A commit pokes every loop; a poke schedules one pass unless one is already pending. A pass
/// writes each subscriber every ring event after its cursor that it wants, then flushes it
/// once: when events arrive faster than a pass takes, the next pass carries all of them, so a
/// busy server makes fewer, larger `writev`s instead of falling behind one event at a time.
///
/// A connection whose unsent bytes pass its high-water mark is skipped (its cursor stays) until
/// it drains; one that falls out of the ring is dropped as too slow. Nothing waits for anyone.
final class LoopFanout: @unchecked Sendable {
    /// A live subscriber: where it reads up to, and where to write.
    private struct Member {
        let subscriber: Subscriber
        let wire: WireWriter
        let carts: Set<String>?
        /// The newest seq it was sent (or that it skipped as another cart's).
        var cursor: Int64
    }

    let loop: any EventLoop
    /// Weak: passes already queued on the loop may outlive a hub (in tests).
    private weak var hub: FanoutHub?
    private let ring: LiveRing
    private let passPending = Atomic<Bool>(false)
    // Touched on `loop` only (hence @unchecked Sendable).
    private var members: [Member] = []
    private var slotByID: [ObjectIdentifier: Int] = [:]
    /// While a pass walks `members`, removals wait in `leaving`: a flush can close a
    /// connection at once, and its close removes the member, from inside the pass.
    private var passing = false
    private var leaving: Set<ObjectIdentifier> = []

    init(loop: any EventLoop, hub: FanoutHub, ring: LiveRing) {
        self.loop = loop
        self.hub = hub
        self.ring = ring
    }

    /// From any thread: the ring has something new.
    func poke() {
        guard !passPending.exchange(true, ordering: .acquiringAndReleasing) else { return }
        loop.execute { self.pass() }
    }

    /// Makes `subscriber` live from the event after `cursor`.
    func add(_ subscriber: Subscriber, wire: WireWriter, carts: Set<String>?, after cursor: Int64) {
        loop.execute {
            guard self.slotByID[ObjectIdentifier(subscriber)] == nil, subscriber.outbox.closedReason == nil else { return }
            self.slotByID[ObjectIdentifier(subscriber)] = self.members.count
            self.members.append(Member(subscriber: subscriber, wire: wire, carts: carts, cursor: cursor))
            self.pass()
        }
    }

    /// Stops writing to `subscriber`: at once when called on the loop (so that a close frame
    /// written next is the connection's last frame), else on the loop's next turn.
    func remove(_ subscriber: Subscriber) {
        if loop.inEventLoop {
            removeMember(ObjectIdentifier(subscriber))
        } else {
            loop.execute { self.removeMember(ObjectIdentifier(subscriber)) }
        }
    }

    /// Writes `frame` (a heartbeat) to every live subscriber that has all events and room.
    func broadcast(_ frame: ByteBuffer) {
        loop.execute {
            self.pass()
            for member in self.members where member.wire.isWritable {
                member.wire.write(frame)
                member.wire.flush()
            }
        }
    }

    /// The channel of a member became writable again: carry on where it stopped.
    func writabilityChanged() {
        poke()
    }

    private func pass() {
        loop.preconditionInEventLoop()
        passPending.store(false, ordering: .sequentiallyConsistent)
        guard let oldest = members.lazy.map(\.cursor).min() else { return }
        let (items, missed) = ring.items(after: oldest)
        guard let ringStart = items.first?.seq else { return }
        passing = true
        for index in members.indices {
            let subscriber = members[index].subscriber
            if !leaving.isEmpty, leaving.contains(ObjectIdentifier(subscriber)) { continue }
            if missed, members[index].cursor + 1 < ringStart {
                leaving.insert(ObjectIdentifier(subscriber))
                hub?.drop(subscriber, because: .tooSlow)
                continue
            }
            // A copy, not `inout members[index]`: the write may re-enter this fan-out.
            var member = members[index]
            write(items, to: &member)
            members[index].cursor = member.cursor
        }
        passing = false
        for id in leaving { removeMember(id) }
        leaving.removeAll()
    }

    /// Writes `member` the items after its cursor that it wants, while its channel has room.
    private func write(_ items: [LiveRing.Item], to member: inout Member) {
        // Seqs ascend: the first item after the cursor by bisection, so that a member far
        // behind makes nobody else scan what it still has to catch up on.
        var start = 0
        var end = items.count
        while start < end {
            let middle = (start + end) / 2
            if items[middle].seq <= member.cursor { start = middle + 1 } else { end = middle }
        }
        var wrote = false
        for item in items[start...] {
            if member.carts?.contains(item.cartID) ?? true {
                guard member.wire.isWritable else { break }
                member.wire.write(item.frame)
                wrote = true
            }
            member.cursor = item.seq
        }
        if wrote { member.wire.flush() }
    }

    private func removeMember(_ id: ObjectIdentifier) {
        if passing {
            leaving.insert(id)
            return
        }
        guard let index = slotByID.removeValue(forKey: id) else { return }
        let last = members.count - 1
        if index != last {
            members.swapAt(index, last)
            slotByID[ObjectIdentifier(members[index].subscriber)] = index
        }
        members.removeLast()
    }
}

import Dispatch
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// Live frames waiting for one event loop.
///
/// Events that arrive while the loop is still writing earlier ones are written in the same
/// pass, and each connection is flushed once per pass: under load, several events leave in one
/// `writev` instead of one each.
///
/// At most `limit` events wait per loop. When the loops cannot keep up with the writes (the
/// whole server is saturated, not one subscriber), the committing writer waits for room: the
/// write rate falls to what the server can fan out, and nothing is dropped. Heartbeats are
/// skipped instead of waiting.
final class LoopBatcher: Sendable {
    static let limit = 1_024
    private struct Pending {
        var frames: [(bytes: ByteBuffer, targets: [LiveTarget])] = []
        var scheduled = false
    }

    let loop: any EventLoop
    private unowned let hub: FanoutHub
    private let pending = NIOLockedValueBox(Pending())
    private let room = DispatchSemaphore(value: LoopBatcher.limit)

    init(loop: any EventLoop, hub: FanoutHub) {
        self.loop = loop
        self.hub = hub
    }

    /// Queues a frame; `waitForRoom: false` gives up (returns false) instead of waiting.
    @discardableResult
    func submit(_ frameBytes: ByteBuffer, to targets: [LiveTarget], waitForRoom: Bool = true) -> Bool {
        if waitForRoom {
            room.wait()
        } else if room.wait(timeout: .now()) == .timedOut {
            return false
        }
        let schedule = pending.withLockedValue { pending in
            pending.frames.append((frameBytes, targets))
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        if schedule {
            loop.execute { self.writeAll() }
        }
        return true
    }

    /// On the loop: writes every waiting frame, then flushes each connection it wrote to.
    private func writeAll() {
        let frames = pending.withLockedValue { pending in
            pending.scheduled = false
            defer { pending.frames.removeAll(keepingCapacity: true) }
            return pending.frames
        }
        for _ in frames { room.signal() }
        var written: [ObjectIdentifier: WireWriter] = [:]
        for (bytes, targets) in frames {
            for target in targets where hub.write(bytes, to: target) {
                written[ObjectIdentifier(target.subscriber)] = target.wire
            }
        }
        for wire in written.values {
            wire.flush()
        }
    }
}

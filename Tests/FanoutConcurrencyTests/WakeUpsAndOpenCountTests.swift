import Foundation
import Synchronization
import Testing

@testable import FanoutConcurrency

/// The wake-ups of a subscription's loop, and the count of open connections a server's
/// shutdown waits out.
@Suite("Wake-ups and open counts")
struct WakeUpsAndOpenCountTests {
    /// A flag set on one task and read on another.
    final class Flag: Sendable {
        private let atomic = Atomic(false)
        func set() { atomic.store(true, ordering: .releasing) }
        var isSet: Bool { atomic.load(ordering: .acquiring) }
    }

    @Test func aWakeUpEndsAWaitOrIsKeptForTheNextOne() async {
        let wakeUps = WakeUps()
        // Nothing waits: kept (one at most) for the next wait, which returns at once.
        wakeUps.wake()
        wakeUps.wake()
        await wakeUps.next()
        // The second of the pair was folded into the first: nothing is kept to cut this short.
        try? await wakeUps.interrupting {}
        #expect(!wakeUps.wokeUp, "two wake-ups with nothing waiting are one")
        // A wait with nothing kept ends at the next wake-up.
        let woken = Flag()
        let waiting = Task {
            await wakeUps.next()
            woken.set()
        }
        wakeUps.wake()
        await waiting.value
        #expect(woken.isSet)
    }

    @Test func aWakeUpInterruptsWhatRunsAndSaysSo() async throws {
        let wakeUps = WakeUps()
        let started = Flag()
        let running = Task {
            try await wakeUps.interrupting {
                started.set()
                try await Task.sleep(for: .seconds(60))
            }
        }
        while !started.isSet { await Task.yield() }
        wakeUps.wake()
        await #expect(throws: CancellationError.self) { try await running.value }
        #expect(wakeUps.wokeUp)
        // What runs to its end is not interrupted.
        try await wakeUps.interrupting {}
        #expect(!wakeUps.wokeUp)
    }

    @Test func theWaitForNoneEndsWithTheLastCloseOrAtItsDeadline() async {
        let count = OpenCount()
        #expect(await count.waitForNone(until: .now + .seconds(60)), "none open: at once")
        count.opened()
        count.opened()
        // Ended by its deadline instead, the wait would say false (a minute later).
        let waiting = Task { await count.waitForNone(until: .now + .seconds(60)) }
        while count.waiting == 0 { await Task.yield() }
        count.closed()
        #expect(count.value == 1)
        #expect(count.waiting == 1, "one still open: the wait goes on")
        count.closed()
        #expect(await waiting.value, "the last close ends the wait")

        count.opened()
        #expect(!(await count.waitForNone(until: .now + .milliseconds(10))), "still open: the wait ended at its deadline")
        #expect(count.value == 1)
        #expect(!(await count.waitForNone(until: .now - .seconds(1))), "a deadline past: at once")
    }
}

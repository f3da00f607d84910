import Foundation
import Synchronization
import Testing

@testable import FanoutConcurrency

/// The one bounded wait: what the server's long-polls, FanoutClient's requests and every use of
/// a PostgreSQL connection rely on to answer by their deadline.
@Suite("A wait bounded by a deadline")
struct DeadlineTests {
    struct Expired: Error {}
    struct Failed: Error {}

    @Test func workThatEndsFirstIsTheAnswer() async throws {
        let answer = try await Deadline.race(until: .now + .seconds(30), expired: { Expired() }) { 42 }
        #expect(answer == 42)
        await #expect(throws: Failed.self) {
            try await Deadline.race(until: .now + .seconds(30), expired: { Expired() }) { () async throws -> Int in throw Failed() }
        }
    }

    @Test func atTheDeadlineTheCallerIsToldAndTheWorkCancelled() async throws {
        let cancelled = Atomic(false)
        let started = ContinuousClock.now
        await #expect(throws: Expired.self) {
            try await Deadline.race(until: .now + .milliseconds(200), expired: { Expired() }) {
                try await Self.sleepTellingCancellation(to: cancelled)
            }
        }
        #expect(started.duration(to: .now) < .seconds(30), "answered at the deadline, not when the work ends")
        #expect(await eventually { cancelled.load(ordering: .relaxed) }, "the work is cancelled")
    }

    /// Work that does not heed cancellation (a query PostgresNIO waits on) does not hold the
    /// caller past the deadline. (It waits on a continuation, not a blocked thread: the tests
    /// share the concurrency pool's two threads.)
    @Test func workThatIgnoresCancellationDoesNotHoldTheCaller() async throws {
        let waiting = Mutex<CheckedContinuation<Void, Never>?>(nil)
        await #expect(throws: Expired.self) {
            try await Deadline.race(until: .now + .milliseconds(100), expired: { Expired() }) {
                await withCheckedContinuation { continuation in waiting.withLock { $0 = continuation } }
            }
        }
        #expect(await eventually { waiting.withLock { $0 != nil } }, "the work still waits")
        waiting.withLock { $0?.resume() }
    }

    @Test func aCancelledCallerCancelsTheWork() async throws {
        let cancelled = Atomic(false)
        let started = Atomic(false)
        let caller = Task {
            try await Deadline.race(until: .now + .seconds(60), expired: { Expired() }) {
                started.store(true, ordering: .relaxed)
                try await Self.sleepTellingCancellation(to: cancelled)
            }
        }
        #expect(await eventually { started.load(ordering: .relaxed) }, "the work runs")
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        let workCancelled = cancelled.load(ordering: .relaxed)
        #expect(workCancelled)
    }

    /// Work that waits a minute unless cancelled, and says when it was.
    private static func sleepTellingCancellation(to cancelled: borrowing Atomic<Bool>) async throws {
        do {
            try await Task.sleep(for: .seconds(60))
        } catch {
            cancelled.store(true, ordering: .relaxed)
            throw error
        }
    }

    /// Polls `condition` for up to 10 s.
    private func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }
}

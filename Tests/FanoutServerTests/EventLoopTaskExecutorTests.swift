import EventLoopExecutor
import FanoutConcurrency
import FanoutProtocol
import FanoutTestSupport
import Foundation
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import FanoutServer

/// A connection's task runs on its event loop, and comes back to it after awaiting work
/// elsewhere: what spares each request two thread hand-offs.
@Suite("Connection's executor")
struct EventLoopTaskExecutorTests {
    actor Elsewhere {
        func work() -> Int { 42 }
    }

    @Test func aTaskPreferringAConnectionsLoopRunsAndResumesOnIt() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let elsewhere = Elsewhere()
        let onLoop = await withTaskExecutorPreference(EventLoopTaskExecutor(loop)) {
            var onLoop = [loop.inEventLoop]
            // An actor's work runs on its own executor, then the task is back on the loop.
            let answer = await elsewhere.work()
            onLoop.append(loop.inEventLoop && answer == 42)
            // A continuation resumed from another thread (as a commit is) comes back too.
            await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume() }
            }
            onLoop.append(loop.inEventLoop)
            return onLoop
        }
        #expect(onLoop == [true, true, true])
    }

    struct Expired: Error {}

    /// `Deadline.race` on a loop (the PostgreSQL engine's batches and statements): the work
    /// runs there, and the loop's own timer answers at the deadline and cancels the work.
    @Test func aRaceOnALoopRunsThereAndTheLoopKeepsItsDeadline() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let executor = EventLoopTaskExecutor(loop)
        let ranOnLoop = try await Deadline.race(until: .now + .seconds(30), on: executor, expired: { Expired() }) {
            loop.inEventLoop
        }
        #expect(ranOnLoop)

        let expiredOnLoop = NIOLockedValueBox<Bool?>(nil)
        let cancelled = NIOLockedValueBox(false)
        let waiting = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
        let started = ContinuousClock.now
        await #expect(throws: Expired.self) {
            try await Deadline.race(
                until: .now + .milliseconds(100), on: executor,
                expired: {
                    expiredOnLoop.withLockedValue { $0 = loop.inEventLoop }
                    return Expired()
                }
            ) {
                // Work that does not end by itself, as a query PostgreSQL never answers.
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in waiting.withLockedValue { $0 = continuation } }
                } onCancel: {
                    cancelled.withLockedValue { $0 = true }
                }
            }
        }
        #expect(started.duration(to: .now) >= .milliseconds(100), "not before the deadline")
        #expect(expiredOnLoop.withLockedValue { $0 } == true, "the loop's timer answered")
        #expect(cancelled.withLockedValue { $0 }, "the work is cancelled")
        await eventually("the work waits") { waiting.withLockedValue { $0 != nil } }
        waiting.withLockedValue { $0?.resume() }
    }

    /// An answer that notes whether it was written on the loop.
    struct Answer: JSONBytesResponse, Sendable {
        let loop: any EventLoop
        let writtenOnLoop: NIOLockedValueBox<[Bool]>

        func json() -> [UInt8] {
            writtenOnLoop.withLockedValue { $0.append(loop.inEventLoop) }
            return Array(#"{"ok":true}"#.utf8)
        }
    }

    @Test func aLargeAnswerIsWrittenOffTheLoopAndTheTaskComesBack() async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let answer = Answer(loop: loop, writtenOnLoop: NIOLockedValueBox([]))
        let (small, large, backOnLoop) = await withTaskExecutorPreference(EventLoopTaskExecutor(loop)) {
            let small = await answer.response(holding: Answer.largestOnLoop)
            let large = await answer.response(holding: Answer.largestOnLoop + 1)
            return (small, large, loop.inEventLoop)
        }
        #expect(answer.writtenOnLoop.withLockedValue { $0 } == [true, false], "a small answer on the loop, a large one off it")
        #expect(backOnLoop)
        for response in [small, large] {
            #expect(response.status == .ok)
            #expect(response.headers[.contentLength] == "11")
        }
    }
}

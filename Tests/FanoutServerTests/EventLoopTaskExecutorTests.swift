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

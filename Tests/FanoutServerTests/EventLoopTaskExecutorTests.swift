import Foundation
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
}

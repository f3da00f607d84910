import FanoutConcurrency
import NIOCore

/// An event loop as the executor a task prefers: the task runs on the thread that reads and
/// writes the loop's sockets.
///
/// The server's connections run their requests here (`FanoutChannel`). Without it, every
/// request crosses threads twice: NIO's loop hands the request to Swift concurrency's pool (a
/// futex wake), and the response back to the loop (an eventfd write and another wake). With it,
/// reading a request, answering it and writing the answer happen in one pass of the loop, and
/// work the task awaits elsewhere (the store's writer, an actor) resumes on the loop, not on
/// whichever thread finished it. The PostgreSQL engine runs its batches, its statements and
/// its follower on loops for the same reason (`PostgresConnections`). SwiftNIO's event loops are
/// serial executors but not task executors, so this adapts one.
///
/// What runs here must not block: a handler's synchronous work holds up every connection and
/// subscriber of its loop for as long as it takes (the store's small reads take microseconds;
/// larger ones are awaited on the store's own threads).
package final class EventLoopTaskExecutor: DeadlineExecutor, Sendable {
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// A deadline kept by the loop's own timer.
    package func schedule(at deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) -> @Sendable () -> Void {
        let (seconds, attoseconds) = ContinuousClock.now.duration(to: deadline).components
        let delay = TimeAmount.nanoseconds(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
        let scheduled = eventLoop.scheduleTask(in: delay, fire)
        return { scheduled.cancel() }
    }
}

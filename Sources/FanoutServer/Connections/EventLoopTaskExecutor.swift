import NIOCore

/// A connection's event loop as the executor its task prefers: the connection's request
/// handling runs on the thread that reads and writes its socket.
///
/// Without it, every request crosses threads twice: NIO's loop hands the request to Swift
/// concurrency's pool (a futex wake), and the response back to the loop (an eventfd write and
/// another wake). With it, reading a request, answering it and writing the answer happen in one
/// pass of the loop, and work the task awaits elsewhere (the store's writer, an actor) resumes
/// on the connection's loop, not on whichever thread finished it. SwiftNIO's event loops are
/// serial executors but not task executors, so this adapts one.
///
/// What runs here must not block: a handler's synchronous work holds up every connection and
/// subscriber of its loop for as long as it takes (the store's small reads take microseconds;
/// larger ones are awaited on the store's own threads).
final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

// What Hummingbird itself costs per request on this machine: `GET /healthz`, the same answer as
// fanout-server's, no middleware. `benchmarks/requests.sh` (PEERS=1) measures it beside
// fanout-server and nginx, once as Hummingbird runs connections (a task each on Swift
// concurrency's pool) and once with `--on-loop`, each connection's task preferring its event loop
// as fanout-server's do. It also answers `POST /pub/NAME` as nchan does (201, the body read and
// dropped): compare.sh's floor of a write, what Hummingbird costs per publish.
// Usage: hummingbird-floor --port PORT [--on-loop] (0: any free port)
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore

/// A connection's event loop as its task's executor (fanout-server's `EventLoopTaskExecutor`).
final class LoopExecutor: TaskExecutor, Sendable {
    let loop: any EventLoop
    init(_ loop: any EventLoop) { self.loop = loop }
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Hummingbird's HTTP/1 channel, its connection handled on its loop.
struct OnLoopChannel: ServerChildChannel {
    let http1: HTTP1Channel
    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
        http1.setup(channel: channel, logger: logger)
    }
    func handle(value: HTTP1Channel.Value, logger: Logger) async {
        await withTaskExecutorPreference(LoopExecutor(value.channel.eventLoop)) { await http1.handle(value: value, logger: logger) }
    }
}

let arguments = CommandLine.arguments
guard let portIndex = arguments.firstIndex(of: "--port"), portIndex + 1 < arguments.count, let port = Int(arguments[portIndex + 1])
else {
    print("usage: hummingbird-floor --port PORT [--on-loop]")
    exit(2)
}
let onLoop = arguments.contains("--on-loop")
let router = Router()
router.get("healthz") { _, _ -> Response in
    Response(
        status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
        body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ok"}"#)))
}
// A publish as nchan answers it, for compare.sh's floor of a write (fanout-bench --peer nchan):
// the body read whole, 201 and a short text; nothing kept, nothing sent on.
router.post("pub/:channel") { request, _ -> Response in
    _ = try await request.body.collect(upTo: 64 * 1_024)
    return Response(
        status: .created, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "queued messages: 0\n")))
}
let app = Application(
    router: router,
    server: HTTPServerBuilder { responder in
        let http1 = HTTP1Channel(responder: responder)
        return onLoop ? OnLoopChannel(http1: http1) as any ServerChildChannel : http1
    },
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    onServerRunning: { channel in
        // Unbuffered: requests.sh waits for this line in a file.
        FileHandle.standardOutput.write(Data("listening on http://127.0.0.1:\(channel.localAddress?.port ?? port)\n".utf8))
    },
    logger: Logger(label: "hummingbird-floor"))
try await app.runService()

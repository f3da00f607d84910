import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

/// `fanout-server` run inside another process, as this package's tests run it: the same flags
/// and the same server, on event loops and a logger of the caller's, with no signal handling.
/// ``stop()`` does what SIGTERM does to the process (the server stops accepting, subscribers
/// end with 1001, in-flight requests finish) and then closes the store.
package final class InProcessServer: Sendable {
    /// The port it listens on (the one given, or the free one `--port 0` picked).
    package let port: Int
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// Starts the server `arguments` describe (`fanout-server`'s flags; no environment variable
    /// is read) and returns once it listens.
    ///
    /// - Throws: the flags' validation error, or why the server cannot start (its database, a
    ///   signing key, the port taken).
    package init(arguments: [String], logger: Logger, eventLoopGroup: EventLoopGroupProvider) async throws {
        let configuration = try FanoutServerCommand.parse(arguments).configuration(environment: [:])
        let (bound, listening) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .bufferingNewest(1))
        let server = try await FanoutServerCommand.build(configuration: configuration, logger: logger, eventLoopGroup: eventLoopGroup) {
            listening.yield($0)
        }
        let group = ServiceGroup(configuration: .init(services: [server.application], logger: logger))
        self.group = group
        running = Task {
            // A server that ends before it listens (its port taken) ends the wait for the port.
            defer { listening.finish() }
            defer { try? server.store.close() }
            try await group.run()
        }
        guard let port = await bound.first(where: { _ in true }) else {
            try await running.value
            throw CancellationError()
        }
        self.port = port
    }

    /// Stops the server as SIGTERM stops `fanout-server`, and returns once it has stopped and
    /// its store is closed.
    ///
    /// - Throws: what ended the server with an error, if anything did.
    package func stop() async throws {
        await group.triggerGracefulShutdown()
        try await running.value
    }
}

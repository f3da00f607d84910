import FanoutTestSupport
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// The database's identity as a client of the real `fanout-server` reads it: in the bytes of the
/// WebSocket welcome, of the event stream's welcome, and of the HTTP read answers.
@Suite("Database identity, end to end", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(2)))
struct DatabaseIdentityEndToEndTests {
    /// Every way of reading says one identity; a restart on the same file says it again, and a
    /// server on a new file says another.
    @Test func theIdentityIsTheFilesEverywhereAndOutlivesARestart() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let identity = try await Self.identity(ofServerOn: database)
        #expect(isDatabaseIdentity(identity), "\(identity)")
        #expect(try await Self.identity(ofServerOn: database) == identity, "the same file after a restart")

        let (other, cleanupOther) = try Mutations.temporaryDatabase()
        defer { cleanupOther() }
        #expect(try await Self.identity(ofServerOn: other) != identity, "a new file, another identity")
    }

    /// `fanout-server backup` while the server writes: the copy is one consistent moment (a
    /// gap-free log through the seq it says), the same database (its identity); restored in
    /// place of the file, the server serves it, and a client that had seen past it is told
    /// (`since_ahead`, 409 on `GET /events`), as PROTOCOL.md promises. Nothing is overwritten.
    @Test func aBackupTakenWhileTheServerWritesRestoresAsTheSameDatabase() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let copy = database + ".backup"
        defer { try? FileManager.default.removeItem(atPath: copy) }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let port = server.port
        let identity = try #require(try await Self.get("/events?since=0", port: port)["databaseId"] as? String)
        let writes = Task { await Mutations.burst(port: { port }, writers: 2, each: 100, tag: "w") }
        await eventually("writes under way") {
            ((try? await Self.get("/events?since=0&limit=1", port: port))?["latestSeq"] as? Int ?? 0) >= 20
        }
        let backup = try await runToExit("fanout-server", ["backup", "--db", database, "--to", copy])
        #expect(backup.status == 0, "\(backup.standardError)")
        _ = await writes.value
        // At least one change after the copy, whatever the burst's pace.
        #expect(await Mutations.add(port: port, cart: "after", sku: "s") != nil)
        let latest = try #require(try await Self.get("/events?since=0&limit=1", port: port)["latestSeq"] as? Int)
        let again = try await runToExit("fanout-server", ["backup", "--db", database, "--to", copy])
        #expect(again.status == 1 && again.standardError.contains("exists already"), "never overwritten: \(again.standardError)")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)

        // "… events through seq N, database ID"
        let said = backup.standardOutput
        let seq = try #require(said.components(separatedBy: "through seq ").last?.split(separator: ",").first.flatMap { Int($0) })
        #expect(said.contains("database \(identity)"), "\(said)")
        #expect(seq > 0 && seq < latest)

        // Restored: the copy in place of the file.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
        try FileManager.default.copyItem(atPath: copy, toPath: database)
        let restored = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let page = try await Self.get("/events?since=0&limit=10000", port: restored.port)
        #expect(page["databaseId"] as? String == identity, "the same database")
        let seqs = (page["events"] as? [[String: Any]] ?? []).compactMap { $0["seq"] as? Int }
        #expect(seqs == Array(1...seq), "gap-free through the backup's seq")
        let (_, ahead) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(restored.port)/events?since=\(latest)")!)
        #expect((ahead as? HTTPURLResponse)?.statusCode == 409, "a client ahead of the restored log is told")
        restored.signal(SIGTERM)
        #expect(await restored.waitForExit() == 0)
    }

    /// Starts a server on `database`, writes one change, reads the identity every way a client
    /// can (expecting them all the same), stops the server, and returns the identity.
    static func identity(ofServerOn database: String) async throws -> String {
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let port = server.port
        #expect(await Mutations.add(port: port, cart: "a", sku: "s") != nil)
        let said: [(String, String?)] = [
            ("WebSocket welcome", try await webSocketWelcome(port: port)["databaseId"] as? String),
            ("event stream welcome", try await eventStreamWelcome(port: port)["databaseId"] as? String),
            ("GET /carts", try await get("/carts", port: port)["databaseId"] as? String),
            ("GET /carts/a", try await get("/carts/a", port: port)["databaseId"] as? String),
            ("GET /events", try await get("/events?since=0", port: port)["databaseId"] as? String),
        ]
        server.signal(SIGTERM)
        let status = await server.waitForExit()
        #expect(status == 0, "exit status \(status) (-1: still running after 30 s); it logged: \(server.standardError.suffix(2_000))")
        let identity = try #require(said[0].1, "the WebSocket welcome says no databaseId")
        for (place, id) in said {
            #expect(id == identity, "\(place) says \(id ?? "nothing")")
        }
        return identity
    }

    static func get(_ path: String, port: Int) async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// The first message of a WebSocket subscription, as the JSON object sent.
    static func webSocketWelcome(port: Int) async throws -> [String: Any] {
        let first = NIOLockedValueBox<String?>(nil)
        var logger = Logger(label: "identity-test")
        logger.logLevel = .critical
        var configuration = WebSocketClientConfiguration()
        configuration.closeTimeout = .seconds(1)
        _ = try await WebSocketClient.connect(
            url: "ws://127.0.0.1:\(port)/subscribe", configuration: configuration, logger: logger
        ) { inbound, _, _ in
            for try await message in inbound.messages(maxSize: 1 << 16) {
                guard case .text(let text) = message else { continue }
                first.withLockedValue { $0 = text }
                return
            }
        }
        let text = try #require(first.withLockedValue { $0 }, "no message before the connection closed")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["type"] as? String == "welcome")
        return object
    }

    /// The data of an event stream's first event, the welcome, read off the socket as sent; the
    /// read gives up after 10 s.
    static func eventStreamWelcome(port: Int) async throws -> [String: Any] {
        let data = try await onThreadOfItsOwn { () throws -> String in
            let socket = try connectedSocket(port: port) { socket in
                var timeout = timeval(tv_sec: 10, tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
            defer { close(socket) }
            let request = Array("GET /subscribe HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAccept: text/event-stream\r\n\r\n".utf8)
            guard retryingInterrupted({ send(socket, request, request.count, 0) }) == request.count else {
                throw POSIXError(.EIO)
            }
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4_096)
            while true {
                let text = String(decoding: received, as: UTF8.self)
                // The welcome event: `event: welcome`, then its `data:` line.
                if let event = text.range(of: "event: welcome\n"),
                    let line = text[event.upperBound...].split(separator: "\n", omittingEmptySubsequences: false).first,
                    text[event.upperBound...].contains("\n\n"), line.hasPrefix("data: ")
                {
                    return String(line.dropFirst("data: ".count))
                }
                let count = retryingInterrupted { recv(socket, &buffer, buffer.count, 0) }
                guard count > 0 else { throw POSIXError(count == 0 ? .ECONNRESET : .ETIMEDOUT) }
                received += buffer[0..<count]
            }
        }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any])
        #expect(object["type"] as? String == "welcome")
        return object
    }
}

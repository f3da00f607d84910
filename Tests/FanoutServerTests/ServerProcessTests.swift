import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOWebSocket
import Testing

@testable import FanoutServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#endif

@Suite("fanout-server process", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct ServerProcessTests {
    static func post(port: Int, cart: String, sku: String) async throws -> Int {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/carts/\(cart)/items")!)
        request.httpMethod = "POST"
        request.httpBody = Data(#"{"sku":"\#(sku)","quantity":1,"unitPriceCents":10}"#.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    /// Whichever of its threads the kernel hands the signal to, and however busy they are.
    @Test(arguments: [SIGTERM, SIGINT])
    func aSignalWhileWritesArriveClosesSubscribersWith1001AndExitsZero(signal: Int32) async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", directory.appending(path: "db.sqlite").path])
        let subscriber = TestSubscriber(port: server.port)
        try await subscriber.subscribe()
        await eventually("snapshot") { !subscriber.snapshots.isEmpty }
        let port = server.port
        let writers = (0..<4).map { writer in
            Task {
                // Until the server stops answering (a failed request ends the writer).
                for index in 0..<2_000 {
                    guard (try? await Self.post(port: port, cart: "w\(writer)", sku: "s\(index % 50)")) == 200 else { return }
                }
            }
        }
        await eventually("writes arriving") { subscriber.events.count >= 20 }
        server.signal(signal)
        let close = try await subscriber.closeFrame()
        #expect(close?.closeCode == .goingAway)
        let status = await server.waitForExit()
        #expect(status == 0, "exit status \(status) (-1: still running after 30 s); it logged: \(server.standardError.suffix(2_000))")
        // Each writer ends at its first refused request. Never cancelled: cancelling a task
        // inside FoundationNetworking's `URLSession.data(for:)` can deadlock the task's status
        // lock against the session's queue finishing the request, and with it the threads of
        // the concurrency pool — the whole test run hung that way once.
        for writer in writers { await writer.value }
    }

    /// A client that sent a request's head and stopped, and one that connected and said nothing,
    /// do not hold a shutdown: the first is answered 503 `shutting_down` after a moment's grace
    /// for its body, the other is closed. (The server waited for the body for `bodyTimeout`, 30 s,
    /// and answered 408: it was how a loaded test run saw SIGINT take 30 s.)
    @Test func aHalfSentRequestAndASilentConnectionDoNotHoldTheShutdown() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", directory.appending(path: "db.sqlite").path])
        let port = server.port
        let head = "POST /carts/a/items HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n"
        // Counted before the two connect (a scrape's own connection is kept alive, and counted).
        _ = await Self.openFiles(port: port)
        let before = try #require(await Self.openFiles(port: port))
        let halfSent = Task { try await RawHTTP.exchange(port: port, Array(head.utf8), timeout: 60) }
        let silent = Task { try await RawHTTP.exchange(port: port, [], timeout: 60) }
        // Both accepted (the server's descriptors count them) before the signal.
        await eventually("both connections accepted") { (await Self.openFiles(port: port) ?? 0) >= before + 2 }
        server.signal(SIGTERM)
        #expect(await server.waitForExit(timeout: .seconds(20)) == 0, "exited well before the 30 s body timeout")
        let answer = try await halfSent.value
        #expect(answer.status != 408, "not held until its body timed out: \(answer.text)")
        if answer.status != nil {
            #expect(answer.status == 503 && answer.text.contains("shutting_down"), "\(answer.text)")
        }
        let quiet = try await silent.value
        #expect(quiet.closed && quiet.text.isEmpty, "closed, nothing said: \(quiet.text)")
    }

    /// `process_open_fds` from `/metrics`.
    static func openFiles(port: Int) async -> Double? {
        guard let (data, _) = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!) else { return nil }
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("process_open_fds ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// PROTOCOL.md: a server shutting down answers waiting requests at once. A parked long-poll
    /// is a request in flight, which the HTTP server waits for: it used to hold SIGTERM for the
    /// poll's whole wait (60 s here).
    @Test func aSignalAnswersAParkedLongPollAtOnceAndExits() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", directory.appending(path: "db.sqlite").path])
        let port = server.port
        let poll = Task {
            try await RawHTTP.exchange(
                port: port, Array("GET /events?since=0&wait=60 HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8), timeout: 70)
        }
        await eventually("the poll parked") {
            let stats = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stats")!).0
            let object = stats.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
            return object?["waitingPolls"] as? Int == 1
        }
        server.signal(SIGTERM)
        // Far below the poll's 60 s, far above a loaded machine's shutdown.
        #expect(await server.waitForExit(timeout: .seconds(20)) == 0)
        let answer = try await poll.value
        #expect(answer.status == 200, "\(answer.text)")
        #expect(answer.text.contains(#""events":[]"#), "answered with what there is: \(answer.text)")
    }

    @Test func aRestartOnTheSameDatabaseContinuesTheSeqAndSubscribersResume() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appending(path: "db.sqlite").path

        let first = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        for index in 0..<5 { #expect(try await Self.post(port: first.port, cart: "c", sku: "a\(index)") == 200) }
        first.signal(SIGKILL)
        _ = await first.waitForExit()

        // The second on one event loop (`--threads 1`): everything it does runs there.
        let second = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--threads", "1"])
        #expect(try Self.eventLoopThreads(of: second.process.processIdentifier) == 1)
        let resumed = TestSubscriber(port: second.port)
        try await resumed.subscribe(since: 3)
        await eventually("the backlog") { resumed.events.count == 2 }
        #expect(try await Self.post(port: second.port, cart: "c", sku: "b") == 200)
        await eventually("the live event") { resumed.events.count == 3 }
        #expect(resumed.events.map(\.seq) == [4, 5, 6])
        await resumed.close()
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
    }

    /// A process's threads of SwiftNIO's shared event-loop group (named `NIO-SGLTN-…`).
    static func eventLoopThreads(of pid: Int32) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").count { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?.hasPrefix("NIO-SGLTN-") == true
        }
    }

    /// Bytes of `field` (`VmRSS`, `VmHWM`: its peak) in a process's /proc status.
    static func memory(_ field: String, of pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("\(field):") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])) * 1_024
    }

    /// A client that floods messages the server cannot read and never reads the answers, behind
    /// a small receive buffer: once the answers fill what the kernels hold and the connection's
    /// 64 KiB, at most 16 KiB more wait, then the connection ends as too slow (4001), its close
    /// frame after the answers that did wait. The server's memory barely moves. Every answer used
    /// to wait in the server until the connection closed, which it never did (34 MiB of resident
    /// memory for these 100 000, which glibc then kept).
    ///
    /// A process of its own: the flood keeps its event loop busy, which in-process would hold up
    /// the servers of the tests running beside it.
    @Test func aClientFloodingBadMessagesWithoutReadingEndsAsTooSlowAndCostsLittleMemory() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A lease far longer than the flood takes to read (bad messages renew no lease): on a
        // loaded machine the default 15 s lapsed first, and the test is of the answers' bound.
        let server = try await ServerProcess(arguments: [
            "--port", "0", "--db", directory.appending(path: "db.sqlite").path, "--lease-ttl", "300",
        ])
        let pid = server.process.processIdentifier
        let port = server.port
        // The kernel's own receive buffer: one of 2 KiB, below loopback's segment sizes, on a
        // client that sends and never reads stalled TCP itself (its segments pruned, both sides
        // retransmitting into backoff) and the flood never reached the server.
        let client = try RawWebSocket(port: port)
        let before = try await onThreadOfItsOwn { () throws -> Int in
            _ = try client.upgrade()
            return try Self.memory("VmRSS", of: pid)
        }
        try await onThreadOfItsOwn {
            // 100 000 answers held would be 14 MB of payload alone.
            for _ in 0..<100_000 { try client.sendText(#"{"type":"nope"}"#) }
        }
        /// Waits until `/stats` says `condition`.
        func stats(_ what: String, _ condition: ([String: Any]) -> Bool) async {
            await eventually(timeout: .seconds(60), what) {
                let data = try? await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stats")!).0
                return condition(data.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:])
            }
        }
        // The server reads the messages more slowly than they were sent: reading the answers
        // before it has ended the connection would give it room again.
        await stats("the subscriber ended as too slow") { ($0["ended"] as? [String: Any])?["tooSlow"] as? Int == 1 }
        // Only now read: what waited, then the close frame.
        let frames = try await onThreadOfItsOwn { try client.frames { $0.opcode == 0x8 } }
        #expect(frames.last?.closeCode == Int(FanoutCloseCode.tooSlow.rawValue), "after \(frames.filter(\.isError).count) answers")
        try await onThreadOfItsOwn { try client.send(.init(opcode: 0x8, payload: [0x03, 0xE8])) }
        await stats("the connection closed") { $0["connections"] as? Int == 0 }
        let peak = try Self.memory("VmHWM", of: pid) - before
        let after = try Self.memory("VmRSS", of: pid) - before
        #expect(peak < 16 << 20, "the server's resident memory rose by \(peak >> 10) KiB at its peak")
        #expect(after < 8 << 20, "and is \(after >> 10) KiB above where it was once the connection closed")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// A server whose open-files limit leaves room for fewer subscribers than
    /// `--max-subscribers` says so at start, and refuses the subscriber past that room with
    /// `server_full`, as at `--max-subscribers`, rather than leaving it in the listen backlog;
    /// requests are still answered.
    @Test func anOpenFilesLimitBelowMaxSubscribersIsSaidAndEndsInServerFull() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let limit = 200
        let server = try await ServerProcess(
            arguments: [
                "--port", "0", "--db", directory.appending(path: "db.sqlite").path, "--lease-ttl", "300", "--max-subscribers", "1000",
            ],
            openFilesLimit: limit)
        let room = limit - 128
        await eventually("the warning at start") { server.standardError.contains("leaves room for \(room) subscribers") }
        #expect(server.standardError.contains("fewer than --max-subscribers 1000"), "\(server.standardError)")
        let port = server.port
        let (admitted, refused) = try await onThreadOfItsOwn { () throws -> ([RawWebSocket], (head: String, body: String)) in
            let admitted = try (0..<room).map { _ in try RawWebSocket(port: port) }
            for client in admitted {
                let answer = try client.upgrade()
                guard answer.head.hasPrefix("HTTP/1.1 101") else { throw POSIXError(.ECONNREFUSED) }
            }
            return (admitted, try RawWebSocket(port: port).upgrade())
        }
        #expect(refused.head.hasPrefix("HTTP/1.1 503"), "\(refused.head)")
        #expect(refused.body.contains(#""code":"server_full""#), "\(refused.body)")
        let health = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/healthz")!)
        #expect((health.1 as? HTTPURLResponse)?.statusCode == 200)
        withExtendedLifetime(admitted) {}
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// An open-files limit that leaves no room for connections: a clear refusal at start. At
    /// 30–36 the server once started, and its accept loop spun at 99 % of a core while every
    /// connection waited (its floor of 16 connections was more than the descriptors left).
    @Test func anOpenFilesLimitTooLowToServeIsRefusedAtStart() async throws {
        let server = ServerProcess.executable("fanout-server").path
        let outcome = try await runToExit(
            executable: URL(fileURLWithPath: "/bin/sh"), ["-c", "ulimit -n 36 && exec \"$0\" --port 0 --db :memory:", server])
        #expect(!outcome.timedOut && outcome.status == 1, "status \(outcome.status)")
        #expect(
            outcome.standardError.contains("the open files limit (36) leaves no room for connections"), "\(outcome.standardError)")
        #expect(!outcome.standardOutput.contains("listening"))
    }

    /// The log says what the server is once it listens (version, engine, database without its
    /// password, how clients get in, the limits in force) and when a shutdown is done (it said
    /// only "Server started…" and "signal received").
    @Test func theLogSaysWhatTheServerIsAndWhenItHasStopped() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appending(path: "db.sqlite").path
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--token", "operator-secret-value"])
        await eventually("the start line") { server.standardError.contains("fanout-server started") }
        let start = try #require(server.standardError.split(separator: "\n").first { $0.contains("fanout-server started") })
        for expected in [
            "fanout.version=\(FanoutVersion.current)", "fanout.engine=sqlite", "fanout.database=\(database)",
            #"fanout.access="operator token""#, "fanout.tls=off", "fanout.schema=", "fanout.migrated=0001_create_carts,",
            "fanout.port=\(server.port)", "fanout.max_subscribers=", "fanout.open_files=", "fanout.lease_ttl_s=15.0",
        ] {
            #expect(start.contains(expected), "\(expected) in \(start)")
        }
        #expect(!server.standardError.contains("operator-secret-value"), "a token is never logged")
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        #expect(server.standardError.contains("shutdown done"), "\(server.standardError)")
        #expect(server.standardError.contains("fanout.subscribers_closed=0"))
    }

    /// `--log-format json`: every line one JSON object, with the same fields as the text lines,
    /// for a log shipper to read without parsing `key=value`.
    @Test func withLogFormatJSONEveryLineIsAJSONObjectWithTheSameFields() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await ServerProcess(
            arguments: [
                "--port", "0", "--db", directory.appending(path: "db.sqlite").path, "--log-format", "json", "--token", "a-secret-token",
            ])
        await eventually("the start line") { server.standardError.contains("fanout-server started") }
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        let lines = server.standardError.split(separator: "\n")
        #expect(lines.count >= 3, "\(server.standardError)")
        let objects = lines.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        #expect(objects.count == lines.count, "every line is a JSON object: \(server.standardError)")
        for object in objects {
            #expect(object["level"] is String && object["message"] is String && object["time"] is String && object["logger"] is String)
        }
        let start = try #require(objects.first { $0["message"] as? String == "fanout-server started" })
        #expect(start["fanout.version"] as? String == FanoutVersion.current)
        #expect(start["fanout.port"] as? String == "\(server.port)")
        #expect(start["fanout.access"] as? String == "operator token")
        #expect(objects.contains { $0["message"] as? String == "shutdown done" })
        #expect(!server.standardError.contains("a-secret-token"))
    }

    /// What an operator reads when a start fails, and `--version`: the port that is taken (it
    /// said only `bind(descriptor:ptr:bytes:): Address already in use (errno: 98)`), a URL of
    /// another database (`mysql://` was taken as a file's path), and no database file left
    /// behind by a start that never listened; the short-secret warning once (it came twice).
    @Test func startUpErrorsNameTheProblemAndLeaveNothingBehind() async throws {
        for program in ["fanout-server", "fanout-client"] {
            let version = try await runToExit(program, ["--version"])
            #expect(version.status == 0 && version.standardOutput == FanoutVersion.current + "\n", "\(program): \(version.standardOutput)")
        }
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let running = try await ServerProcess(arguments: ["--port", "0", "--db", directory.appending(path: "first.sqlite").path])
        let second = directory.appending(path: "second.sqlite").path
        let taken = try await runToExit("fanout-server", ["--port", "\(running.port)", "--db", second])
        #expect(taken.status == 1)
        #expect(
            taken.standardError.contains("port \(running.port) on 127.0.0.1 is in use by another program"), "\(taken.standardError)")
        #expect(!FileManager.default.fileExists(atPath: second), "the database the failed start made is gone")
        #expect(!FileManager.default.fileExists(atPath: second + "-lock"))
        running.signal(SIGTERM)
        #expect(await running.waitForExit() == 0)

        let mysql = try await runToExit("fanout-server", ["--port", "0", "--db", "mysql://fanout:secret@db.internal/carts"])
        #expect(mysql.status == 1)
        #expect(mysql.standardError.contains("a mysql:// URL is not supported"), "\(mysql.standardError)")
        #expect(!mysql.standardError.contains("secret"), "the password is not printed")

        let token = try await runToExit("fanout-server", ["token", "--sub", "a", "--carts", "a", "--jwt-secret", "short"])
        #expect(token.status == 0)
        #expect(token.standardError.components(separatedBy: "warning:").count == 2, "one warning: \(token.standardError)")
        // Without a secret: said with the token command's usage, not the server's.
        let unsigned = try await runToExit("fanout-server", ["token", "--sub", "a", "--carts", "a"])
        #expect(unsigned.status == 64)
        #expect(unsigned.standardError.contains("give the server's secret with --jwt-secret or FANOUT_JWT_SECRET"))
        #expect(unsigned.standardError.contains("Usage: fanout-server token"), "\(unsigned.standardError)")
        // A mistyped command is named, with the one meant (it said "Unexpected argument").
        let mistyped = try await runToExit("fanout-server", ["tokn", "--sub", "a"])
        #expect(mistyped.status == 64)
        #expect(mistyped.standardError.contains("'tokn' is not a command of fanout-server (token, backup); did you mean 'token'?"))
    }

    @Test func badCommandLinesExitNonZeroWithAMessage() async throws {
        for arguments in [
            ["--port", "70000"], ["--lease-ttl", "1", "--heartbeat-interval", "5"], ["--log-level", "loud"],
            ["--port", "0", "--db", "/nonexistent-directory/db.sqlite"], ["--threads", "0"], ["--threads", "5000"],
        ] {
            let outcome = try await runToExit("fanout-server", arguments)
            #expect(!outcome.timedOut, "\(arguments): the server should have refused to start")
            #expect(outcome.status != 0, "\(arguments)")
            #expect(outcome.standardError.contains("Error"), "\(arguments): \(outcome.standardError)")
        }
        // --outbox-limit is --ring-size's older name: read as the same option.
        for name in ["--ring-size", "--outbox-limit"] {
            let outcome = try await runToExit("fanout-server", [name, "0"])
            #expect(outcome.status != 0)
            #expect(outcome.standardError.contains("--ring-size must be ≥ 1"), "\(name): \(outcome.standardError)")
        }
    }

    /// A PostgreSQL database nobody answers for: a clear error at once, not a server that
    /// starts and fails every request. The password is not printed.
    @Test func anUnreachablePostgreSQLIsAnErrorAtStart() async throws {
        let port = try freeLoopbackPort()
        for arguments in [
            ["--db", "postgres://fanout:secret@127.0.0.1:\(port)/fanout"],
            ["--database-url", "postgresql://fanout:secret@127.0.0.1:\(port)/fanout"],
        ] {
            let outcome = try await runToExit("fanout-server", ["--port", "0"] + arguments)
            #expect(!outcome.timedOut, "\(arguments): the server should have refused to start")
            #expect(outcome.status != 0, "\(arguments)")
            #expect(
                outcome.standardError.contains("cannot connect to postgres://fanout@127.0.0.1:\(port)/fanout"), "\(outcome.standardError)")
            #expect(!outcome.standardError.contains("secret"), "the password stays out of the message")
        }
        let noDatabase = try await runToExit("fanout-server", ["--port", "0", "--db", "postgres://fanout:secret@127.0.0.1:\(port)"])
        #expect(noDatabase.status != 0)
        #expect(noDatabase.standardError.contains("names no database"), "\(noDatabase.standardError)")
        #expect(!noDatabase.standardError.contains("secret"), "the password stays out of every message: \(noDatabase.standardError)")
    }

    /// The released server as an attacker meets it: the weakest signed token (write only, no
    /// carts) reads no operator page however the path is spelled.
    @Test func operatorPagesStayClosedToASignedTokenWhateverThePathsSpelling() async throws {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let secret = "a process test secret of at least 32 bytes"
        let server = try await ServerProcess(arguments: [
            "--port", "0", "--db", directory.appending(path: "db.sqlite").path, "--token", "operator", "--jwt-secret", secret,
        ])
        let minted = try await runToExit(
            "fanout-server", ["token", "--jwt-secret", secret, "--sub", "w", "--carts", "", "--scope", "write"])
        let token = minted.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(minted.status == 0 && !token.isEmpty, "\(minted.standardError)")
        for path in ["/stats", "/metrics", "/stats/", "//stats", "/stats//", "/./stats", "/%73tats", "/metrics/", "//metrics"] {
            let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nConnection: close\r\n\r\n"
            let answer = try await RawHTTP.exchange(port: server.port, Array(request.utf8))
            let canonical = path == "/stats" || path == "/metrics"
            #expect(answer.status == (canonical ? 403 : 404), "\(path): \(answer.text.prefix(200))")
            #expect(!answer.text.contains("liveSubscribers") && !answer.text.contains("# TYPE"), "\(path) leaked the operator's figures")
        }
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }
}

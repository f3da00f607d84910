import ArgumentParser
import FanoutProtocol
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `fanout-bench`: fan-out measured from the outside, against fanout-server, nchan or NATS.
///
/// Opens N WebSocket subscribers, performs M writes from K writers, and prints one JSON line:
/// deliveries per second, write→receipt latency (writer's send to each receipt, one clock, this
/// process), lost and duplicated deliveries, and given the server's pids, its CPU seconds per
/// delivery and RSS from /proc.
///
/// A tool of its own, not part of `fanout-client`: the client a user installs carries no
/// benchmark code. Run it with `swift run -c release fanout-bench …` (benchmarks/README.md).
@main
struct FanoutBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout-bench",
        abstract: "Measure fan-out: deliveries/s, latency, losses, server CPU and memory.",
        discussion: """
            Examples:
              fanout-bench --url http://127.0.0.1:8080 --subscribers 100 --events 2000 --server-pid 4242
              fanout-bench --peer nchan --url http://127.0.0.1:9090 --subscribers 1000 --events 500
              fanout-bench --peer nats --url http://127.0.0.1:8443 --nats-url nats://127.0.0.1:4222 --subscribers 100
              fanout-bench --subscribers 9000 --events 0 --server-pid 4242   # idle memory
              # subscribers over several processes: listeners first, then the one that writes
              fanout-bench --subscribers 15000 --events 0 --ready-file r1 --writes-file w > l1.json
              fanout-bench --subscribers 15000 --events 50 --rate 5 --writes-file w --await-file l1.json
              # presence: 1 000 subscribers present on one cart join, then leave
              fanout-bench --subscribers 1000 --presence-cart room --server-pid 4242
              fanout-bench --subscribers 1000 --presence-cart room --presence-baseline --server-pid 4242
            """)

    enum Peer: String, ExpressibleByArgument, CaseIterable, Sendable {
        /// fanout-server: subscribe at /subscribe, write cart mutations.
        case fanout
        /// nginx + nchan: subscribe at /sub/bench, publish to /pub/bench.
        case nchan
        /// nats-server, core protocol: subscribe to the subject `bench` over its WebSocket
        /// listener (`--url`), publish over its TCP port (`--nats-url`).
        case nats
    }

    @Option(
        help:
            "The server's base HTTP URL; repeat it for several servers on one database (subscribers and writers are spread over them in turn)."
    )
    var url: [String] = ["http://127.0.0.1:8080"]

    @Option(help: "WebSocket subscribers to open.")
    var subscribers: Int = 100

    @Option(help: "Writes to perform (0: only connect and measure memory).")
    var events: Int = 2_000

    @Option(help: "Concurrent writers.")
    var writers: Int = 4

    @Option(help: "Writes per second in all (default: each writer as fast as its answers come).")
    var rate: Double?

    @Option(name: .customLong("server-pid"), help: "A server process to measure (repeatable; summed).")
    var serverPIDs: [Int32] = []

    @Option(help: "fanout, nchan or nats.")
    var peer: Peer = .fanout

    @Option(
        help: """
            The peer's name in the report, when it is not --peer: another server that answers as --peer does (the \
            HTTP floor, hummingbird-floor, publishes as nchan).
            """)
    var label: String?

    @Option(
        help: """
            With --events 0: seconds to hold the subscribers idle while the server's CPU is measured (heartbeats, \
            leases, pings), after a second to settle; 0 measures memory only. --ready-file is written before.
            """)
    var idleSeconds: Double = 0

    @Option(help: "NATS's client port, where --peer nats publishes (nats://host:port); --url is then its WebSocket listener.")
    var natsURL: String?

    @Option(help: "Seconds to wait for the last deliveries after the last write.")
    var drainTimeout: Double = 60

    @Option(help: "Bearer token for fanout-server (or set FANOUT_TOKEN).")
    var token: String?

    @Option(help: "Bearer token for the subscribers only, when it is not --token: an end user's signed token.")
    var subscriberToken: String?

    @Option(help: "Threads receiving for the subscribers (default: half the cores, at least 1).")
    var receiveThreads: Int?

    @Option(help: "How the subscribers receive: websocket, or sse (Server-Sent Events; for nchan, its EventSource; not for NATS).")
    var transport: Transport = .websocket

    @Option(help: "A file to write once the subscribers are connected (their count), for a script that starts several bench processes.")
    var readyFile: String?

    @Option(
        help: """
            Where the writes are shared between bench processes: with --events > 0 this process saves its acknowledged writes \
            there; with --events 0 it waits for that file and measures its subscribers' receipts of those writes.
            """)
    var writesFile: String?

    @Option(
        help:
            "With --events > 0: after its own deliveries, wait until this file exists (a listening process's result; repeatable) before measuring the servers' CPU."
    )
    var awaitFile: [String] = []

    @Option(help: "With --events 0 and --writes-file: seconds to wait for the writes file.")
    var listenTimeout: Double = 900

    @Option(
        help: """
            Measure presence instead of writes (fanout, WebSocket): every subscriber subscribes to this cart present \
            (key m<i>), all join, then all leave; prints each phase's presence messages, time, server CPU and RSS.
            """)
    var presenceCart: String?

    @Option(help: "With --presence-cart: seconds to wait for each phase to complete.")
    var presenceTimeout: Double = 120

    @Flag(help: "With --presence-cart: subscribe to the cart without presence, for what connecting and closing cost alone.")
    var presenceBaseline = false

    @Option(
        help: """
            With --presence-cart: a presence storm of this many seconds instead (every subscriber present, with \
            --subscriber-token, changes its state --storm-rate times a second), and what another user (--token) sees \
            meanwhile: /healthz's latency, and that of its own events on another cart.
            """)
    var presenceStorm: Double?

    @Option(help: "With --presence-storm: state changes a second per subscriber.")
    var stormRate: Double = 1

    enum Transport: String, ExpressibleByArgument, CaseIterable, Sendable {
        case websocket, sse
    }

    func validate() throws {
        for url in url {
            guard let components = URLComponents(string: url), ["http", "https"].contains(components.scheme ?? "") else {
                throw ValidationError("--url must be the server's http:// URL (got \(url))")
            }
        }
        if let rate, !(rate > 0) { throw ValidationError("--rate must be > 0") }
        guard idleSeconds >= 0 else { throw ValidationError("--idle-seconds must be ≥ 0") }
        guard subscribers >= 0, events >= 0, writers >= 1, (receiveThreads ?? 1) >= 1 else {
            throw ValidationError("--subscribers and --events must be ≥ 0, --writers and --receive-threads ≥ 1")
        }
        if peer == .nats {
            guard natsURL != nil else { throw ValidationError("--peer nats needs --nats-url nats://host:port") }
            guard transport == .websocket else { throw ValidationError("NATS subscribers speak WebSocket only") }
        }
        if presenceCart != nil {
            guard peer == .fanout, transport == .websocket, url.count == 1 else {
                throw ValidationError("--presence-cart measures one fanout-server's WebSocket subscribers")
            }
        } else if presenceBaseline || presenceStorm != nil {
            throw ValidationError("--presence-baseline and --presence-storm go with --presence-cart")
        }
        if let presenceStorm, !(presenceStorm > 0) || !(stormRate > 0) || presenceBaseline {
            throw ValidationError("--presence-storm and --storm-rate must be > 0, without --presence-baseline")
        }
    }

    func run() async throws {
        let token = token ?? ProcessInfo.processInfo.environment["FANOUT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        let target = BenchTarget(
            peer: peer, transport: transport, baseURLs: url, natsURL: natsURL, token: token, subscriberToken: subscriberToken ?? token,
            presence: presenceCart.map { PresenceSubscription(cart: $0, isPresent: !presenceBaseline) })
        let server = ProcessMeter(pids: serverPIDs)
        // This process too: what receiving and writing cost the bench itself.
        let bench = ProcessMeter(pids: [getpid()])
        let fleet = SubscriberFleet(target: target, threads: receiveThreads ?? SubscriberFleet.defaultThreads)
        if let presenceStorm {
            let storm = PresenceStorm(
                fleet: fleet, subscribers: subscribers, seconds: presenceStorm, rate: stormRate, server: server, bench: bench,
                timeout: .seconds(presenceTimeout))
            print(try await storm.run().json())
            Foundation.exit(0)
        }
        if target.presence != nil {
            let run = PresenceRun(fleet: fleet, subscribers: subscribers, server: server, bench: bench, timeout: .seconds(presenceTimeout))
            print(try await run.run().json())
            Foundation.exit(0)
        }
        let rssBefore = server.rssKiB()

        try await fleet.connect(count: subscribers)

        if let readyFile {
            try Data("\(fleet.connectedCount)\n".utf8).write(to: URL(fileURLWithPath: readyFile), options: .atomic)
        }
        var report = BenchReport(
            peer: label ?? peer.rawValue, transport: transport.rawValue, subscribers: subscribers, connected: fleet.connectedCount,
            events: events,
            writers: writers, rssBefore: rssBefore, rss: nil)
        report.rate = rate

        guard events > 0 else {
            guard let writesFile else {
                try await Task.sleep(for: .seconds(1))  // let the server settle its buffers
                if idleSeconds > 0, let before = server.cpuSeconds() {
                    try await Task.sleep(for: .seconds(idleSeconds))
                    if let after = server.cpuSeconds(), fleet.connectedCount > 0 {
                        report.idleCpuMicrosPerConnectionSecond = (after - before) * 1e6 / (Double(fleet.connectedCount) * idleSeconds)
                    }
                }
                report.serverRssKiB = server.rssKiB()
                print(report.json())
                Foundation.exit(0)
            }
            // A listener: another process writes; its writes arrive through the file.
            guard let writes = try await SharedWrites.wait(for: writesFile, timeout: .seconds(listenTimeout)) else {
                throw BenchFailure("no writes in \(writesFile) within \(listenTimeout) s")
            }
            await fleet.waitForDeliveries(of: Set(writes.map(\.seq)), timeout: .seconds(drainTimeout))
            report.serverRssKiB = server.rssKiB()
            let sent = writes.map(\.sentAt)
            let clock = ContinuousClock()
            report.record(
                writes: writes, receipts: await fleet.receipts(), start: sent.min() ?? clock.now, writesDone: sent.max() ?? clock.now,
                clock: clock)
            report.events = writes.count
            print(report.json())
            Foundation.exit(0)
        }

        // NATS's writers connect here, before the clock starts; HTTP ones on their first write.
        let openWriters = try await Writers.open(target: target, count: writers)
        let cpuBefore = server.cpuSeconds()
        let benchCpuBefore = bench.cpuSeconds()
        let clock = ContinuousClock()
        let start = clock.now
        let writes = try await openWriters.perform(events, rate: rate, clock: clock)
        let writesDone = clock.now
        if let writesFile { try SharedWrites.save(writes, to: writesFile) }
        let acknowledged = Set(writes.map(\.seq))
        await fleet.waitForDeliveries(of: acknowledged, timeout: .seconds(drainTimeout))
        let benchCpuAfter = bench.cpuSeconds()
        if !(await SharedWrites.awaitFiles(awaitFile, timeout: .seconds(drainTimeout))) {
            throw BenchFailure("the listeners' results \(awaitFile) did not all appear within \(drainTimeout) s")
        }
        let cpuAfter = server.cpuSeconds()
        report.serverRssKiB = server.rssKiB()
        if serverPIDs.count > 1 { report.serverRssKiBEach = server.rssKiBEach() }
        report.record(writes: writes, receipts: await fleet.receipts(), start: start, writesDone: writesDone, clock: clock)
        if let cpuBefore, let cpuAfter {
            report.serverCpuSeconds = cpuAfter - cpuBefore
        }
        if let benchCpuBefore, let benchCpuAfter {
            report.clientCpuSeconds = benchCpuAfter - benchCpuBefore
        }
        print(report.json())
        // Thousands of open sockets close faster with the process than one by one.
        Foundation.exit(0)
    }
}

/// Where to subscribe and how to write, per peer.
struct BenchTarget: Sendable {
    let peer: FanoutBench.Peer
    let transport: FanoutBench.Transport
    /// One server's, or several servers' on one database: subscriber or writer `i` uses the
    /// `i % count`-th.
    let baseURLs: [String]
    /// NATS's client port (`nats://host:port`), where its writers publish.
    let natsURL: String?
    /// The writers' token.
    let token: String?
    /// The subscribers' token: the writers', or an end user's signed one.
    let subscriberToken: String?
    /// With `--presence-cart`: the one cart every subscriber subscribes to, and whether present.
    var presence: PresenceSubscription? = nil

    func baseURL(_ index: Int) -> String { baseURLs[index % baseURLs.count] }

    func subscribeURL(_ index: Int) -> String {
        let ws = baseURL(index).replacingOccurrences(of: "http://", with: "ws://").replacingOccurrences(of: "https://", with: "wss://")
        switch peer {
        case .fanout: return ws + "/subscribe"
        case .nchan: return ws + "/sub/bench"
        case .nats: return ws + "/"
        }
    }

    /// What the bench publishes to nchan and NATS: the write's seq, which `seq(in:)` reads back.
    static func published(seq: Int64) -> String {
        #"{"seq":\#(seq)}"#
    }

    /// The seq of a received message: fanout events carry `"seq":N` with `"type":"event"`;
    /// what we publish to nchan and NATS is `{"seq":N}`. Scanned, not decoded: the client shares two
    /// cores with the server and must not be the bottleneck.
    static func seq<Bytes: Collection<UInt8>>(in bytes: Bytes) -> Int64? {
        guard var probe = end(of: seqKey, in: bytes) else { return nil }
        var value: Int64 = 0
        var digits = 0
        while probe < bytes.endIndex, case let digit = bytes[probe], (48...57).contains(digit) {
            value = value * 10 + Int64(digit - 48)
            digits += 1
            probe = bytes.index(after: probe)
        }
        return digits > 0 ? value : nil
    }

    /// Whether a text message received from `peer` is one of the deliveries the bench counts.
    static func isDelivery<Bytes: Collection<UInt8>>(_ bytes: Bytes, from peer: FanoutBench.Peer) -> Bool {
        peer != .fanout || contains(eventType, in: bytes)
    }

    static let welcomeType = Array(#""type":"welcome""#.utf8)
    private static let snapshotType = Array(#""type":"snapshot""#.utf8)
    private static let moreParts = Array(#""more":true"#.utf8)

    /// Whether a fanout message is a snapshot's last part: the subscription is then complete.
    static func isLastSnapshotPart<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        contains(snapshotType, in: bytes) && !contains(moreParts, in: bytes)
    }
    private static let eventType = Array(#""type":"event""#.utf8)
    private static let seqKey = Array(#""seq":"#.utf8)

    /// Whether `key` occurs in `bytes`.
    static func contains<Bytes: Collection<UInt8>>(_ key: [UInt8], in bytes: Bytes) -> Bool {
        end(of: key, in: bytes) != nil
    }

    /// How many times `key` occurs in `bytes`, without overlaps.
    static func occurrences<Bytes: Collection<UInt8>>(of key: [UInt8], in bytes: Bytes) -> Int {
        var count = 0
        var rest = bytes[...]
        while let next = end(of: key, in: rest) {
            count += 1
            rest = rest[next...]
        }
        return count
    }

    /// The index just after the first occurrence of `key` in `bytes`.
    private static func end<Bytes: Collection<UInt8>>(of key: [UInt8], in bytes: Bytes) -> Bytes.Index? {
        guard let first = key.first else { return bytes.startIndex }
        var from = bytes.startIndex
        search: while let start = bytes[from...].firstIndex(of: first) {
            var probe = bytes.index(after: start)
            for byte in key.dropFirst() {
                guard probe < bytes.endIndex, bytes[probe] == byte else {
                    from = bytes.index(after: start)
                    continue search
                }
                probe = bytes.index(after: probe)
            }
            return probe
        }
        return nil
    }
}

/// A failure to report on stderr with a non-zero exit.
struct BenchFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

import FanoutProtocol
import Foundation
import NIOPosix
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// One acknowledged write: its seq and when its request was sent.
struct Write: Sendable {
    var seq: Int64
    var sentAt: ContinuousClock.Instant
}

/// K writers sharing M writes: HTTP requests (fanout, nchan), or NATS publishes each confirmed
/// by a PING/PONG round trip on a connection per writer. Each writer waits for one write's
/// acknowledgement before it sends the next.
struct Writers: Sendable {
    let target: BenchTarget
    let count: Int
    /// NATS: writer `i`'s connection. HTTP writers share `URLSession.shared` instead.
    private let publishers: [NATSPublisher]

    /// Opens the writers' connections (NATS only: URLSession connects on first use).
    static func open(target: BenchTarget, count: Int) async throws -> Writers {
        var publishers: [NATSPublisher] = []
        if target.peer == .nats, let url = target.natsURL {
            // One loop for all of them: writing is a small share of the bench's work. Never shut
            // down: the bench exits with its sockets open (see `FanoutBench.run`).
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            for _ in 0..<count { publishers.append(try await NATSPublisher.connect(to: url, group: group)) }
        }
        return Writers(target: target, count: count, publishers: publishers)
    }

    /// Performs `total` writes, spread over the writers; at most `rate` a second in all when
    /// given (write `n` of the run starts no earlier than `n / rate` seconds in), else each
    /// writer as fast as its answers come.
    func perform(_ total: Int, rate: Double? = nil, clock: ContinuousClock) async throws -> [Write] {
        let nextSeq = Counter()
        let start = clock.now
        return await withTaskGroup(of: [Write].self) { group in
            for writer in 0..<count {
                let share = total / count + (writer < total % count ? 1 : 0)
                group.addTask {
                    var done: [Write] = []
                    for index in 0..<share {
                        if let rate {
                            let due = start + .seconds(Double(index * self.count + writer) / rate)
                            try? await clock.sleep(until: due)
                        }
                        if let write = await self.write(writer: writer, index: index, nextSeq: nextSeq, clock: clock) {
                            done.append(write)
                        }
                    }
                    return done
                }
            }
            var all: [Write] = []
            for await part in group { all += part }
            return all
        }
    }

    private func write(writer: Int, index: Int, nextSeq: Counter, clock: ContinuousClock) async -> Write? {
        var request: URLRequest
        var publishedSeq: Int64?
        switch target.peer {
        case .fanout:
            // Carts of 10 lines, like real ones: the response carries the whole cart.
            request = URLRequest(url: URL(string: "\(target.baseURL(writer))/carts/bench-\(writer)-\(index / 10)/items")!)
            request.httpBody = Data(#"{"sku":"s\#(index % 10)","quantity":1,"unitPriceCents":100}"#.utf8)
            if let token = target.token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        case .nchan:
            let seq = nextSeq.next()
            publishedSeq = seq
            request = URLRequest(url: URL(string: "\(target.baseURL(writer))/pub/bench")!)
            request.httpBody = Data(BenchTarget.published(seq: seq).utf8)
        case .nats:
            let seq = nextSeq.next()
            let sentAt = clock.now
            guard (try? await publishers[writer].publish(seq: seq)) != nil else { return nil }
            return Write(seq: seq, sentAt: sentAt)
        }
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let sentAt = clock.now
        guard let (data, response) = try? await URLSession.shared.data(for: request),
            let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status)
        else { return nil }
        if let publishedSeq { return Write(seq: publishedSeq, sentAt: sentAt) }
        guard let seq = BenchTarget.seq(in: data) else { return nil }
        return Write(seq: seq, sentAt: sentAt)
    }
}

final class Counter: Sendable {
    private let value = Atomic<Int64>(0)
    func next() -> Int64 { value.add(1, ordering: .relaxed).newValue }
}

/// CPU time and resident memory of server processes, from /proc.
struct ProcessMeter: Sendable {
    let pids: [Int32]

    /// utime + stime of all pids, in seconds; nil without pids or when /proc is unreadable.
    func cpuSeconds() -> Double? {
        guard !pids.isEmpty else { return nil }
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        var total = 0.0
        for pid in pids {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // Fields after "(comm)": state is field 3; utime and stime are fields 14 and 15.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
            total += (user + system) / ticksPerSecond
        }
        return total
    }

    /// VmRSS of all pids together, in KiB.
    func rssKiB() -> Int? {
        rssKiBEach().map { $0.reduce(0, +) }
    }

    /// VmRSS of each pid, in KiB, in the order of `pids`.
    func rssKiBEach() -> [Int]? {
        guard !pids.isEmpty else { return nil }
        var each: [Int] = []
        for pid in pids {
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
                let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
            else { return nil }
            each.append(kib)
        }
        return each
    }
}

/// The one JSON line a bench run prints.
struct BenchReport: JSONLine {
    /// The median, 99th percentile and largest of some times (ms).
    struct Latency: Encodable {
        var p50: Double
        var p99: Double
        var max: Double

        /// Of `values`; nil when there are none.
        init?(_ values: [Double]) {
            let sorted = values.sorted()
            guard let largest = sorted.last else { return nil }
            p50 = sorted[sorted.count / 2]
            p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
            max = largest
        }
    }

    var peer: String
    var transport: String
    var subscribers: Int
    var connected: Int
    var events: Int
    var writers: Int
    /// The writes per second asked for (`--rate`); nil when each writer went as fast as it could.
    var rate: Double?
    var acknowledged = 0
    var deliveries = 0
    var seconds: Double?
    var deliveriesPerSecond: Double?
    var mutationsPerSecond: Double?
    var latencyMs: Latency?
    var lost = 0
    var duplicated = 0
    var serverCpuSeconds: Double? {
        didSet { serverCpuMicrosPerDelivery = serverCpuSeconds.map { deliveries > 0 ? $0 * 1e6 / Double(deliveries) : 0 } }
    }
    var serverCpuMicrosPerDelivery: Double?
    /// The bench's own CPU over the same span (writers and subscribers).
    var clientCpuSeconds: Double? {
        didSet { clientCpuMicrosPerDelivery = clientCpuSeconds.map { deliveries > 0 ? $0 * 1e6 / Double(deliveries) : 0 } }
    }
    var clientCpuMicrosPerDelivery: Double?
    var serverRssKiB: Int?
    var serverRssBeforeKiB: Int?
    /// With --idle-seconds: the server's CPU over that span, per connection and second.
    var idleCpuMicrosPerConnectionSecond: Double?
    /// With several servers: each one's VmRSS at the end, in the order of `--server-pid`.
    var serverRssKiBEach: [Int]?

    init(peer: String, transport: String, subscribers: Int, connected: Int, events: Int, writers: Int, rssBefore: Int?, rss: Int?) {
        self.peer = peer
        self.transport = transport
        self.subscribers = subscribers
        self.connected = connected
        self.events = events
        self.writers = writers
        self.serverRssBeforeKiB = rssBefore
        self.serverRssKiB = rss
    }

    mutating func record(
        writes: [Write], receipts: [[Receipt]], start: ContinuousClock.Instant, writesDone: ContinuousClock.Instant, clock: ContinuousClock
    ) {
        acknowledged = writes.count
        var sentAt: [Int64: ContinuousClock.Instant] = [:]
        for write in writes { sentAt[write.seq] = write.sentAt }
        var latencies: [Double] = []
        latencies.reserveCapacity(receipts.reduce(0) { $0 + $1.count })
        var last = writesDone
        for subscriber in receipts {
            var seen = Set<Int64>()
            for receipt in subscriber {
                deliveries += 1
                if !seen.insert(receipt.seq).inserted { duplicated += 1 }
                if let sent = sentAt[receipt.seq] {
                    latencies.append(Self.milliseconds(receipt.at - sent))
                }
                last = max(last, receipt.at)
            }
            lost += sentAt.keys.filter { !seen.contains($0) }.count
        }
        let elapsed = Self.milliseconds(last - start) / 1_000
        seconds = elapsed
        deliveriesPerSecond = elapsed > 0 ? Double(deliveries) / elapsed : nil
        let writing = Self.milliseconds(writesDone - start) / 1_000
        mutationsPerSecond = writing > 0 ? Double(acknowledged) / writing : nil
        latencyMs = Latency(latencies)
    }

    static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
    }

}

/// A report printed as one JSON line, keys sorted.
protocol JSONLine: Encodable {}

extension JSONLine {
    func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}

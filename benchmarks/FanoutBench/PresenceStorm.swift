import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `--presence-storm SECONDS`: one user's presence storm, and what the others see meanwhile.
/// Every subscriber (one token, `--subscriber-token`) subscribes to `--presence-cart` present,
/// then each changes its state `--storm-rate` times a second for SECONDS. Meanwhile, as another
/// user: `/healthz` is asked every 50 ms, and a change is made to another cart every 100 ms
/// (`--token`, the writers' credential) and read back by a long-poll of that cart's events.
/// Reports the refusals the storm met, `/healthz`'s and the other user's event latency (p50,
/// p99, max), the server's CPU and RSS, and the subscribers the server ended meanwhile, by
/// reason (from `/stats`).
struct PresenceStorm {
    let fleet: SubscriberFleet
    let subscribers: Int
    let seconds: Double
    let rate: Double
    let server: ProcessMeter
    let bench: ProcessMeter
    let timeout: Duration

    /// The other user's cart.
    static let otherCart = "storm-bystander"

    func run() async throws -> PresenceStormReport {
        guard let subscription = fleet.target.presence, subscription.isPresent else {
            throw BenchFailure("a presence storm needs --presence-cart")
        }
        var report = PresenceStormReport(cart: subscription.cart, subscribers: subscribers, seconds: seconds, rate: rate)
        try await fleet.connect(count: subscribers)
        let connected = fleet.connectedCount
        report.connected = connected
        // Joined: every subscriber is a member that knows the others, or was refused.
        _ = await fleet.waitForPresence(timeout: timeout) { tallies in
            let members = tallies.filter { $0.errors == 0 }.count
            return tallies.count == connected && tallies.allSatisfy { $0.errors > 0 || $0.members >= members }
        }
        let joined = await fleet.presenceTallies()
        report.members = joined.filter { $0.errors == 0 }.count
        report.refusedJoins = joined.filter { $0.errors > 0 }.count
        let endedBefore = try await ended()

        let clock = ContinuousClock()
        let before = MeterSample(server: server, bench: bench, at: clock.now)
        let stormEnd = clock.now + .milliseconds(Int64(seconds * 1_000))
        let errorsBefore = joined.reduce(0) { $0 + $1.errors }
        async let health = probeHealth(until: stormEnd + .seconds(1))
        async let bystander = writeAndFollow(until: stormEnd + .seconds(1))
        await fleet.changePresence(rate: rate, for: .milliseconds(Int64(seconds * 1_000)))
        let (healthLatencies, healthFailures) = try await health
        let (eventLatencies, missed) = try await bystander
        let after = MeterSample(server: server, bench: bench, at: clock.now)

        let tallies = await fleet.presenceTallies()
        report.refusedChanges = tallies.reduce(0) { $0 + $1.errors } - errorsBefore
        report.presenceMessages = tallies.reduce(0) { $0 + $1.wholes + $1.joins + $1.updates + $1.leaves }
        report.wholePresences = tallies.reduce(0) { $0 + $1.wholes }
        report.healthzAnswers = healthLatencies.count
        report.healthzMs = .init(healthLatencies)
        report.healthzFailures = healthFailures
        report.otherUsersEvents = eventLatencies.count
        report.otherUsersEventMs = .init(eventLatencies)
        report.otherUsersEventsMissed = missed
        if let start = before.serverCpu, let end = after.serverCpu { report.serverCpuSeconds = end - start }
        report.serverRssBeforeKiB = before.serverRssKiB
        report.serverRssAfterKiB = after.serverRssKiB
        let endedAfter = try await ended()
        report.endedMeanwhile = endedAfter.merging(endedBefore) { $0 - $1 }.filter { $0.value > 0 }
        report.stillConnected = (await fleet.presenceTallies()).filter { !$0.isClosed }.count
        return report
    }

    /// `GET /healthz` every 50 ms until `end`: each answer's time, and how many failed or were
    /// not 200.
    private func probeHealth(until end: ContinuousClock.Instant) async throws -> ([Double], Int) {
        let url = try url("/healthz")
        var latencies: [Double] = []
        var failures = 0
        var request = URLRequest(url: url)
        request.timeoutInterval = 30
        while ContinuousClock.now < end {
            let sent = ContinuousClock.now
            let answer = try? await URLSession.shared.data(for: request)
            latencies.append(BenchReport.milliseconds(ContinuousClock.now - sent))
            if (answer?.1 as? HTTPURLResponse)?.statusCode != 200 { failures += 1 }
            try await Task.sleep(until: sent + .milliseconds(50), clock: .continuous)
        }
        return (latencies, failures)
    }

    /// Another user's change to `otherCart` every 100 ms until `end`, and a long-poll of that
    /// cart's events: each event's time from its request to its arrival, and how many changes
    /// acknowledged never arrived.
    private func writeAndFollow(until end: ContinuousClock.Instant) async throws -> ([Double], Int) {
        let sentAt = NIOLockedValueBox<[Int64: ContinuousClock.Instant]>([:])
        let arrivals = NIOLockedValueBox<[Int64: ContinuousClock.Instant]>([:])
        let start = try await latestSeq()
        let follower = Task {
            var since = start
            while !Task.isCancelled {
                var request = URLRequest(url: try url("/events?since=\(since)&carts=\(Self.otherCart)&wait=5"))
                request.timeoutInterval = 30
                authorize(&request)
                guard let (data, _) = try? await URLSession.shared.data(for: request),
                    let page = try? FanoutJSON.decoder().decode(EventsPage.self, from: data)
                else { continue }
                let now = ContinuousClock.now
                arrivals.withLockedValue { arrived in for event in page.events { arrived[event.seq] = now } }
                since = max(since, page.nextSince)
            }
        }
        var index = 0
        while ContinuousClock.now < end {
            let sent = ContinuousClock.now
            var request = URLRequest(url: try url("/carts/\(Self.otherCart)/items"))
            request.httpMethod = "POST"
            request.timeoutInterval = 30
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            authorize(&request)
            request.httpBody = Data(#"{"sku":"s\#(index % 50)","quantity":1,"unitPriceCents":1}"#.utf8)
            index += 1
            if let (data, response) = try? await URLSession.shared.data(for: request), (response as? HTTPURLResponse)?.statusCode == 200,
                let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
                let seq = (object["seq"] as? NSNumber)?.int64Value
            {
                sentAt.withLockedValue { $0[seq] = sent }
            }
            try await Task.sleep(until: sent + .milliseconds(100), clock: .continuous)
        }
        // The last ones' arrival.
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline,
            sentAt.withLockedValue({ Set($0.keys) }).subtracting(arrivals.withLockedValue { Set($0.keys) }).count > 0
        {
            try await Task.sleep(for: .milliseconds(20))
        }
        follower.cancel()
        let sent = sentAt.withLockedValue { $0 }
        let arrived = arrivals.withLockedValue { $0 }
        let latencies = sent.compactMap { seq, at in arrived[seq].map { BenchReport.milliseconds($0 - at) } }
        return (latencies, sent.count - latencies.count)
    }

    private func latestSeq() async throws -> Int64 {
        var request = URLRequest(url: try url("/events?since=0&limit=1"))
        authorize(&request)
        let (data, _) = try await URLSession.shared.data(for: request)
        return try FanoutJSON.decoder().decode(EventsPage.self, from: data).latestSeq
    }

    /// `/stats` `ended`: the subscribers the server ended so far, by reason.
    private func ended() async throws -> [String: Int] {
        var request = URLRequest(url: try url("/stats"))
        authorize(&request)
        let (data, _) = try await URLSession.shared.data(for: request)
        let object = (try JSONSerialization.jsonObject(with: data)) as? [String: Any]
        return ((object?["ended"] as? [String: Any]) ?? [:]).compactMapValues { ($0 as? NSNumber)?.intValue }
    }

    private func url(_ path: String) throws -> URL {
        guard let url = URL(string: fleet.target.baseURL(0) + path) else { throw BenchFailure("bad URL for \(path)") }
        return url
    }

    private func authorize(_ request: inout URLRequest) {
        if let token = fleet.target.token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
    }
}

/// The JSON line of a presence storm.
struct PresenceStormReport: JSONLine {
    var mode = "presence-storm"
    var cart: String
    var subscribers: Int
    var seconds: Double
    /// State changes a second each subscriber sent.
    var rate: Double
    var connected = 0
    /// Subscribers admitted as members, and refused (`presence_full`: past a limit).
    var members = 0
    var refusedJoins = 0
    /// State changes refused (`presence_rate_limited`).
    var refusedChanges = 0
    /// Presence messages the storm's subscribers received meanwhile, whole presences among them.
    var presenceMessages = 0
    var wholePresences = 0
    /// `/healthz`'s answers: how many, their times, and how many were not 200.
    var healthzAnswers = 0
    var healthzMs: BenchReport.Latency?
    var healthzFailures = 0
    /// The other user's events: how many arrived, their times, and how many never did.
    var otherUsersEvents = 0
    var otherUsersEventMs: BenchReport.Latency?
    var otherUsersEventsMissed = 0
    var serverCpuSeconds: Double?
    var serverRssBeforeKiB: Int?
    var serverRssAfterKiB: Int?
    /// Subscribers the server ended during the storm, by reason (`/stats` `ended`).
    var endedMeanwhile: [String: Int] = [:]
    /// The storm's subscribers still connected at its end.
    var stillConnected = 0

    init(cart: String, subscribers: Int, seconds: Double, rate: Double) {
        self.cart = cart
        self.subscribers = subscribers
        self.seconds = seconds
        self.rate = rate
    }
}

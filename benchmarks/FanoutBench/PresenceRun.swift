import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `--presence-cart`: the one cart every subscriber subscribes to, present (key `m<i>`) or, for
/// the baseline, not.
struct PresenceSubscription: Sendable {
    let cart: String
    let isPresent: Bool
}

/// One subscriber's presence messages, counted on its loop as they arrive.
///
/// Told apart by the end of their bytes: the server writes keys sorted, so `type` is always
/// last (`…,"type":"presenceJoin"}`), and a message is classified without reading it through
/// (a whole presence of 1 000 members is about 60 KiB; only it is scanned, for its members).
struct PresenceTally: Sendable {
    /// Whole presences of the cart (`presence`): one on joining, more only if the server had
    /// to resend it (the subscriber was not reading).
    var wholes = 0
    var joins = 0
    var updates = 0
    var leaves = 0
    /// `error` messages (a refused subscription: `presence_full`, …).
    var errors = 0
    /// Members it knows of: the last whole presence's, plus joins, minus leaves.
    var members = 0
    /// Its snapshot's last part came: the server has taken its subscription.
    var subscribed = false
    /// Its connection is closed.
    var isClosed = false

    private static let whole = Array(#""type":"presence"}"#.utf8)
    private static let join = Array(#""type":"presenceJoin"}"#.utf8)
    private static let update = Array(#""type":"presenceUpdate"}"#.utf8)
    private static let leave = Array(#""type":"presenceLeave"}"#.utf8)
    private static let snapshot = Array(#""type":"snapshot"}"#.utf8)
    private static let error = Array(#""type":"error"}"#.utf8)
    private static let memberKey = Array(#""member":"#.utf8)

    /// Counts `message` if it is a presence message, the snapshot or an error; false for
    /// anything else (the welcome, heartbeats).
    mutating func count(_ message: UnsafeRawBufferPointer) -> Bool {
        if message.ends(with: Self.join) {
            joins += 1
            members += 1
        } else if message.ends(with: Self.leave) {
            leaves += 1
            members -= 1
        } else if message.ends(with: Self.update) {
            updates += 1
        } else if message.ends(with: Self.whole) {
            wholes += 1
            members = BenchTarget.occurrences(of: Self.memberKey, in: message)
        } else if message.ends(with: Self.snapshot) {
            if BenchTarget.isLastSnapshotPart(message) { subscribed = true }
        } else if message.ends(with: Self.error) {
            errors += 1
        } else {
            return false
        }
        return true
    }
}

extension UnsafeRawBufferPointer {
    fileprivate func ends(with suffix: [UInt8]) -> Bool {
        count >= suffix.count && self[(count - suffix.count)...].elementsEqual(suffix)
    }
}

/// What presence costs the server: N subscribers join one cart, one after another as they
/// connect, until each knows all N members; then all close at once, until the cart has no
/// member. Each phase's presence messages (counted by the subscribers), wall time, server CPU
/// and RSS. With `--presence-baseline` the same subscribers subscribe to the cart without
/// presence: what connecting, subscribing and closing cost without it.
struct PresenceRun {
    let fleet: SubscriberFleet
    let subscribers: Int
    let server: ProcessMeter
    let bench: ProcessMeter
    let timeout: Duration

    func run() async throws -> PresenceReport {
        guard let subscription = fleet.target.presence else { throw BenchFailure("a presence run needs --presence-cart") }
        let clock = ContinuousClock()
        var report = PresenceReport(cart: subscription.cart, present: subscription.isPresent, subscribers: subscribers)

        var before = MeterSample(server: server, bench: bench, at: clock.now)
        try await fleet.connect(count: subscribers)
        let connected = fleet.connectedCount
        report.connected = connected
        // Joined: every subscriber knows all members (present), or has its snapshot (baseline).
        let joined = await fleet.waitForPresence(timeout: timeout) { tallies in
            tallies.count == connected
                && tallies.allSatisfy { subscription.isPresent ? $0.members >= connected || $0.errors > 0 : $0.subscribed }
        }
        var after = MeterSample(server: server, bench: bench, at: clock.now)
        var tallies = await fleet.presenceTallies()
        let errors = tallies.reduce(0) { $0 + $1.errors }
        guard joined, errors == 0 else {
            throw BenchFailure(
                "the join did not complete within \(timeout): \(errors) errors, "
                    + "\(tallies.filter { $0.members < connected }.count) of \(connected) subscribers know fewer than \(connected) members")
        }
        report.join = PresenceReport.Phase(
            before: before, after: after, messages: tallies.reduce(0) { $0 + $1.wholes + $1.joins + $1.updates },
            expected: subscription.isPresent ? connected + connected * (connected - 1) / 2 : 0)
        report.wholePresences = tallies.reduce(0) { $0 + $1.wholes }

        before = after
        await fleet.closeAll()
        // Left: the server closed every connection (it ends a subscriber, leaving its presence,
        // before it closes it), and says the cart has no member.
        var empty = await fleet.waitForPresence(timeout: timeout) { tallies in tallies.allSatisfy { $0.isClosed } }
        if empty { empty = try await waitForNoMembers(of: subscription.cart, until: clock.now + timeout) }
        after = MeterSample(server: server, bench: bench, at: clock.now)
        guard empty else {
            throw BenchFailure("the leave did not complete within \(timeout): the connections or the cart's presence remain")
        }
        tallies = await fleet.presenceTallies()
        report.leave = PresenceReport.Phase(
            before: before, after: after, messages: tallies.reduce(0) { $0 + $1.leaves },
            expected: subscription.isPresent ? connected * (connected - 1) / 2 : 0)
        return report
    }

    /// Polls `GET /carts/{cart}/presence` until its `members` is empty; false at `deadline`.
    private func waitForNoMembers(of cart: String, until deadline: ContinuousClock.Instant) async throws -> Bool {
        guard let url = URL(string: "\(fleet.target.baseURL(0))/carts/\(cart)/presence") else {
            throw BenchFailure("bad cart name \(cart)")
        }
        var request = URLRequest(url: url)
        if let token = fleet.target.token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        struct Presence: Decodable { var members: [IgnoredMember] }
        struct IgnoredMember: Decodable {}
        while ContinuousClock.now < deadline {
            if let (data, _) = try? await URLSession.shared.data(for: request),
                let presence = try? JSONDecoder().decode(Presence.self, from: data), presence.members.isEmpty
            {
                return true
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}

/// The server's and the bench's CPU, the server's RSS, at one moment.
struct MeterSample {
    var serverCpu: Double?
    var benchCpu: Double?
    var serverRssKiB: Int?
    var at: ContinuousClock.Instant

    init(server: ProcessMeter, bench: ProcessMeter, at: ContinuousClock.Instant) {
        serverCpu = server.cpuSeconds()
        benchCpu = bench.cpuSeconds()
        serverRssKiB = server.rssKiB()
        self.at = at
    }
}

/// The JSON line of a presence run.
struct PresenceReport: JSONLine {
    /// One phase (the joins, or the leaves).
    struct Phase: Encodable {
        var seconds: Double
        /// Presence messages the subscribers received in the phase.
        var messages: Int
        /// What the protocol sends N members joining one after another (N whole presences +
        /// N(N−1)/2 joins), or leaving (N(N−1)/2 leaves); 0 for the baseline.
        var expected: Int
        var serverCpuSeconds: Double?
        var serverCpuMicrosPerMessage: Double?
        var benchCpuSeconds: Double?
        var serverRssBeforeKiB: Int?
        var serverRssAfterKiB: Int?

        init(before: MeterSample, after: MeterSample, messages: Int, expected: Int) {
            seconds = BenchReport.milliseconds(after.at - before.at) / 1_000
            self.messages = messages
            self.expected = expected
            if let start = before.serverCpu, let end = after.serverCpu {
                serverCpuSeconds = end - start
                serverCpuMicrosPerMessage = messages > 0 ? (end - start) * 1e6 / Double(messages) : nil
            }
            if let start = before.benchCpu, let end = after.benchCpu { benchCpuSeconds = end - start }
            serverRssBeforeKiB = before.serverRssKiB
            serverRssAfterKiB = after.serverRssKiB
        }
    }

    var mode = "presence"
    var cart: String
    /// False for `--presence-baseline`.
    var present: Bool
    var subscribers: Int
    var connected = 0
    /// Whole presences received in all: one per subscriber unless the server had to resend.
    var wholePresences = 0
    var join: Phase?
    var leave: Phase?

    init(cart: String, present: Bool, subscribers: Int) {
        self.cart = cart
        self.present = present
        self.subscribers = subscribers
    }
}

import ArgumentParser
import Dispatch
import FanoutClient
import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import ProcessSignals

/// `fanout-client subscribe`: prints every event once, in order, across any disconnect.
struct SubscribeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscribe",
        abstract: "Print cart events as they happen; reconnect and resume after any disconnect.",
        discussion: """
            Prints one line per event (and per snapshot). On a disconnect — server restart,
            lease expiry, slow-consumer drop, network error — it reconnects with backoff and
            resumes after the last seq it printed: nothing missed, nothing printed twice.
            Ctrl-C exits 0.

            With --presence (and --cart), it is present on its carts and prints who else is
            (the whole presence, then each join, state change and leave); if the server refuses
            presence it says why on stderr and prints the carts' events without it.

            Example: fanout-client subscribe --cart alice --format text --state-file ~/.fanout-seq
            """)

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case json, text
    }

    @OptionGroup var connection: ServerConnection

    @Option(name: .customLong("cart"), help: "Only this cart (repeatable); all carts when absent.")
    var carts: [String] = []

    @Option(help: "Resume after this seq instead of starting from a snapshot.")
    var since: Int64?

    @Option(
        help:
            "File keeping the last printed seq and its database's identity, so a restarted client resumes too (from a snapshot when the server's database is another one)."
    )
    var stateFile: String?

    @Option(help: "json: one JSON object per line (with type and seq); text: for people.")
    var format: Format = .json

    @Option(help: "websocket, or sse: the same subscription as Server-Sent Events.")
    var transport: FanoutSubscription.Transport = .webSocket

    @Flag(help: "Be present on the carts (named with --cart, or by the token) and print their presence.")
    var presence = false

    @Option(
        help:
            "The member key to be present under (1–64 of A-Za-z0-9._-; implies --presence): a restart with it within the lease is no new member."
    )
    var presenceKey: String?

    @Option(help: "The state to show, a JSON object such as '{\"editing\":true}' (implies --presence).")
    var presenceState: String?

    func validate() throws {
        do {
            for cart in carts { try CartLimits.checkCartID(cart) }
        } catch {
            throw ValidationError(error.message)
        }
        if let since, since < 0 { throw ValidationError("--since must be ≥ 0") }
        _ = try presenceRequest()
    }

    /// The presence asked for: nil without `--presence`, `--presence-key` or `--presence-state`.
    ///
    /// - Throws: `ValidationError` for a key outside its rules, or a state that is not a JSON
    ///   object of at most `PresenceLimits.maxStateBytes`.
    func presenceRequest() throws -> PresenceRequest? {
        guard presence || presenceKey != nil || presenceState != nil else { return nil }
        var state: PresenceState = [:]
        do {
            if let presenceKey { try PresenceLimits.check(key: presenceKey) }
            if let presenceState {
                guard let decoded = try? FanoutJSON.decoder().decode(PresenceState.self, from: Data(presenceState.utf8)) else {
                    throw ValidationError(
                        "--presence-state must be a JSON object, such as '{\"editing\":true}' (got \(presenceState.prefix(80)))")
                }
                try PresenceLimits.check(decoded)
                state = decoded
            }
        } catch let error as FanoutError {
            throw ValidationError("--presence-\(error.code == .invalidPresence ? "key" : "state"): \(error.message)")
        }
        return PresenceRequest(key: presenceKey, state: state)
    }

    func run() async throws {
        let position: any ResumePosition
        do {
            position = try stateFile.map { try FileResumePosition(file: URL(fileURLWithPath: $0)) } ?? MemoryResumePosition()
        } catch {
            throw ClientFailure("state file: \(error)")
        }
        let start = since ?? position.last
        let printer = EventPrinter(format: format, position: position, start: start)
        let subscription = FanoutSubscription(
            server: try connection.server(), transport: transport, credentials: connection.credentials, trust: try connection.trust.trust())
        // The watch must live as long as the subscription: a released one stops acting on
        // signals. `_ = watch` after the call did not keep an earlier version alive: an
        // optimised build released it at once (Ctrl-C did nothing). `withExtendedLifetime` has
        // no async form, so it marks the end of the scope instead.
        let signalWatch = try Self.exitOnSignals(printer: printer)
        defer { withExtendedLifetime(signalWatch) {} }
        let carts = carts.isEmpty ? nil : carts
        let presence = try presenceRequest()
        let (never, _) = AsyncStream<Void>.makeStream()
        while true {
            do {
                try await subscription.run(
                    plan: { FanoutSubscription.Plan(carts: carts, since: printer.last, presence: presence) }, reconsider: never,
                    handle: { update in try printer.handle(update) })
                return
            } catch is EventPrinter.OtherDatabase {
                // Subscribed again at once, with no seq: a snapshot of the database served now.
                continue
            }
        }
    }

    /// Ctrl-C and SIGTERM end the program with status 0, but never between printing a line
    /// and saving its seq: a restarted client would print that line again.
    static func exitOnSignals(printer: EventPrinter) throws -> SignalWatch {
        do {
            return try SignalWatch([SIGINT, SIGTERM]) { _ in printer.exclusively { Foundation.exit(0) } }
        } catch {
            throw ClientFailure("cannot watch for Ctrl-C and SIGTERM: \(error)")
        }
    }
}

/// Prints a subscription's updates as lines, skipping anything at or before the last printed
/// seq, and reports connection trouble on stderr.
final class EventPrinter: Sendable {
    let format: SubscribeCommand.Format
    let position: any ResumePosition
    private let output: FileHandle
    /// Held while a line is printed and its seq saved, so an exit cannot split the two. Holds
    /// the seq to resume after: `--since`, else the state file's.
    private let printing: NIOLockedValueBox<Progress>

    struct Progress {
        var last: Int64?
        /// Carts in the parts of the snapshot under way.
        var cartsInParts = 0
        /// Disconnected since the last welcome: the outage was said once, its end is said next.
        var inOutage = false
        /// A welcome came at least once: the server's name resolved then.
        var everConnected = false
        /// Attempts in a row whose host name did not resolve.
        var unresolved = 0
    }

    /// Attempts in a row whose host name does not resolve before the client gives up, when it
    /// never connected (a name that once resolved is retried for good: the network may be down).
    static let unresolvedAttempts = 3

    init(format: SubscribeCommand.Format, position: any ResumePosition, start: Int64?, output: FileHandle = .standardOutput) {
        self.format = format
        self.position = position
        self.output = output
        printing = NIOLockedValueBox(Progress(last: start))
    }

    var last: Int64? { printing.withLockedValue { $0.last } }

    /// Runs `body` between lines, never in the middle of printing one.
    func exclusively(_ body: () -> Void) {
        printing.withLockedValue { _ in body() }
    }

    /// - Throws: `ClientFailure` when the server refuses us for good (credentials, origin, a bad
    ///   value): the program ends with it.
    func handle(_ update: FanoutSubscription.Update) throws {
        try printing.withLockedValue { progress in try show(update, progress: &progress) }
    }

    private func show(_ update: FanoutSubscription.Update, progress: inout Progress) throws {
        switch update {
        case .event(let event, let raw):
            if let last = progress.last, event.seq <= last { return }
            emit(format == .json ? raw : Self.text(event))
            try advance(&progress, to: event.seq)
        case .snapshotPart(let carts, let seq, let reason, let more, let raw):
            let total = progress.cartsInParts + carts.count
            progress.cartsInParts = more ? total : 0
            emit(format == .json ? raw : Self.text(snapshotPart: carts, seq: seq, reason: reason, more: more, total: total))
        case .snapshot(let snapshot, _):
            // Only the whole snapshot counts: resuming after its seq before its last part
            // would skip the carts of the parts not yet received.
            try advance(&progress, to: snapshot.seq)
        case .welcome(let welcome):
            // A new connection: parts of a snapshot cut short by a disconnect are dropped.
            progress.cartsInParts = 0
            progress.everConnected = true
            progress.unresolved = 0
            if progress.inOutage {
                progress.inOutage = false
                report("reconnected\(progress.last.map { "; resuming after seq \($0)" } ?? "")")
            }
            // A seq of another database (a reset one, a new one, another server's) says nothing
            // of this one's changes: resuming after it would skip some of them silently.
            if let databaseID = welcome.databaseID, try !position.use(databaseID: databaseID), let last = progress.last {
                progress.last = nil
                report(
                    "the server's database (\(databaseID)) is not the one seq \(last) was of; starting over from a snapshot")
                throw OtherDatabase()
            }
        case .presence(let message, let raw):
            emit(format == .json ? raw : Self.text(presence: message))
        case .presenceRefused(let error):
            report("presence refused: \(error); following the carts without it")
        case .serverError(let code, let message):
            report("server error \(code): \(message)")
        case .disconnected(let problem, _):
            if problem.isUnresolvable, !progress.everConnected {
                progress.unresolved += 1
                if progress.unresolved >= Self.unresolvedAttempts {
                    throw ClientFailure("\(Self.spoken(problem)) (tried \(progress.unresolved) times); giving up")
                }
            }
            // Said once per outage, not at each attempt; its end is said when it ends.
            guard !progress.inOutage else { return }
            progress.inOutage = true
            report("\(Self.spoken(problem)); retrying\(progress.last.map { ", to resume after seq \($0)" } ?? "")")
        case .refused(let error, _):
            throw ClientFailure("\(error)")
        case .connecting:
            break
        }
    }

    /// A problem as a line for people: what made the connection end, without the category's
    /// prefix for the plain ones ("cannot reach 127.0.0.1:8080 (connection refused: …)").
    static func spoken(_ problem: ConnectionProblem) -> String {
        if case .unreachable(let why) = problem { return why }
        return "\(problem)"
    }

    /// The subscription resumed on another database than the position's: it starts over.
    struct OtherDatabase: Error {}

    private func advance(_ progress: inout Progress, to seq: Int64) throws {
        progress.last = seq
        try position.advance(to: seq)
    }

    private func emit(_ line: String) {
        output.write(Data((line + "\n").utf8))
    }

    private func report(_ line: String) {
        FileHandle.standardError.write(Data("fanout-client: \(line)\n".utf8))
    }

    /// One part of a snapshot, as it arrives; the last part says how many carts in all.
    static func text(snapshotPart carts: [Cart], seq: Int64, reason: SnapshotReason, more: Bool, total: Int? = nil) -> String {
        let head =
            switch (more, total) {
            case (false, nil), (false, carts.count):
                "snapshot at seq \(seq) (\(reason.rawValue)): \(carts.count) carts"
            case (false, let total?):
                "snapshot at seq \(seq) (\(reason.rawValue)), last part: \(carts.count) carts, \(total) in all"
            case (true, _):
                "snapshot at seq \(seq) (\(reason.rawValue)), part: \(carts.count) carts, more follow"
            }
        return head + carts.map { "\n  \($0.id) v\($0.version): \($0.itemCount) items" }.joined()
    }

    /// A presence message: `presence alice: ann, bob {"editing":true}`, `joined alice: bob`, …
    static func text(presence message: ServerMessage) -> String {
        switch message {
        case .presence(let cartID, let members):
            "presence \(cartID): " + (members.isEmpty ? "nobody" : members.map(text(member:)).joined(separator: ", "))
        case .presenceJoin(let cartID, let member): "joined \(cartID): \(text(member: member))"
        case .presenceUpdate(let cartID, let member): "updated \(cartID): \(text(member: member))"
        case .presenceLeave(let cartID, let id, let reason): "left \(cartID): \(text(id: id)) (\(reason.rawValue))"
        default: ""
        }
    }

    /// `user/key`, or `key` for a member without a user.
    private static func text(id: PresenceMember.ID) -> String {
        id.user.map { "\($0)/\(id.member)" } ?? id.member
    }

    /// `user/key`, then its state as compact JSON unless it is empty.
    private static func text(member: PresenceMember) -> String {
        guard !member.state.isEmpty, let state = try? FanoutJSON.encoder().encode(member.state) else { return text(id: member.id) }
        return "\(text(id: member.id)) \(String(decoding: state, as: UTF8.self))"
    }

    static func text(_ event: CartEvent) -> String {
        let what: String =
            switch event.change {
            case .itemAdded(let item, let added): "added \(added) × \(item.sku) (now \(item.quantity))"
            case .quantityChanged(let sku, let quantity): "set \(sku) to \(quantity)"
            case .itemRemoved(let sku): "removed \(sku)"
            case .cartCleared: "cleared"
            }
        return "#\(event.seq)  \(event.cartID) v\(event.version)  \(what)"
    }
}

extension FanoutSubscription.Transport: ExpressibleByArgument {}

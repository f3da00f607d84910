import ArgumentParser
import Dispatch
import FanoutProtocol
import Foundation
import HummingbirdWSClient
import Logging
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

            Example: fanout-client subscribe --cart alice --format text --state-file ~/.fanout-seq
            """)

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case json, text
    }

    @Option(help: "The server's WebSocket URL.")
    var url: String = "ws://127.0.0.1:8080/subscribe"

    @Option(name: .customLong("cart"), help: "Only this cart (repeatable); all carts when absent.")
    var carts: [String] = []

    @Option(help: "Resume after this seq instead of starting from a snapshot.")
    var since: Int64?

    @Option(help: "File keeping the last printed seq, so a restarted client resumes too.")
    var stateFile: String?

    @Option(help: "json: one JSON object per line (with type and seq); text: for people.")
    var format: Format = .json

    @Option(help: "Bearer token, if the server requires one (or set FANOUT_TOKEN).")
    var token: String?

    @Option(help: "websocket, or sse: the same subscription as Server-Sent Events (--url keeps its ws:// form).")
    var transport: SubscriberSession.Transport = .websocket

    func validate() throws {
        guard let components = URLComponents(string: url), ["ws", "wss"].contains(components.scheme ?? ""),
            components.host?.isEmpty == false
        else {
            throw ValidationError("--url must be a ws:// or wss:// URL (got \(url))")
        }
        if transport == .sse, URLComponents(string: url)?.scheme == "wss" {
            throw ValidationError("--transport sse speaks plain HTTP: use a ws:// URL")
        }
        do {
            for cart in carts { try CartLimits.checkCartID(cart) }
        } catch {
            throw ValidationError(error.message)
        }
        if let since, since < 0 { throw ValidationError("--since must be ≥ 0") }
    }

    func run() async throws {
        let token = token ?? ProcessInfo.processInfo.environment["FANOUT_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        let state = try SeqState(stateFile: stateFile, since: since)
        let printer = EventPrinter(format: format, state: state)
        let session = SubscriberSession(
            url: url, transport: transport, carts: carts.isEmpty ? nil : carts, token: token, state: state, printer: printer)
        // The watch must live as long as the session: a released one stops acting on signals.
        // `_ = watch` after the call did not keep an earlier version alive: an optimised build
        // released it at once (Ctrl-C did nothing). `withExtendedLifetime` has no async form, so
        // it marks the end of the scope instead.
        let signalWatch = try Self.exitOnSignals(printer: printer)
        defer { withExtendedLifetime(signalWatch) {} }
        try await session.run()
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

/// The last seq printed, and its file.
final class SeqState: Sendable {
    private let file: URL?
    private let seq: NIOLockedValueBox<Int64?>

    init(stateFile: String?, since: Int64?) throws {
        file = stateFile.map { URL(fileURLWithPath: $0) }
        var start = since
        if since == nil, let file, FileManager.default.fileExists(atPath: file.path) {
            let text = try String(contentsOf: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            guard let saved = Int64(text), saved >= 0 else {
                throw ClientFailure("state file \(file.path) does not hold a seq (found \"\(text.prefix(40))\")")
            }
            start = saved
        }
        seq = NIOLockedValueBox(start)
    }

    var last: Int64? { seq.withLockedValue { $0 } }

    /// Records a printed seq, in the file too (written whole, then renamed over the old one).
    func advance(to value: Int64) throws {
        seq.withLockedValue { $0 = value }
        guard let file else { return }
        try Data("\(value)\n".utf8).write(to: file, options: .atomic)
    }
}

/// Prints server messages as lines, skipping anything at or before the last printed seq.
final class EventPrinter: Sendable {
    let format: SubscribeCommand.Format
    let state: SeqState
    private let output: FileHandle
    /// Held while a line is printed and its seq saved, so an exit cannot split the two; it
    /// guards the connection's snapshot parts received so far.
    private let printing = NIOLockedValueBox(SnapshotAssembly())

    init(format: SubscribeCommand.Format, state: SeqState, output: FileHandle = .standardOutput) {
        self.format = format
        self.state = state
        self.output = output
    }

    /// Runs `body` between lines, never in the middle of printing one.
    func exclusively(_ body: () -> Void) {
        printing.withLockedValue { _ in body() }
    }

    /// - Parameter raw: the message as the server sent it (printed as is in JSON format).
    /// - Throws: when the message breaks the protocol (an event inside a snapshot's parts, parts
    ///   of different snapshots): the connection is dropped and resumed.
    func handle(_ message: ServerMessage, raw: String) throws {
        try printing.withLockedValue { snapshot in try show(message, raw: raw, snapshot: &snapshot) }
    }

    private func show(_ message: ServerMessage, raw: String, snapshot: inout SnapshotAssembly) throws {
        switch message {
        case .event(let event):
            guard !snapshot.isIncomplete else {
                throw ProtocolViolation(description: "event \(event.seq) arrived before the last part of the snapshot")
            }
            if let last = state.last, event.seq <= last { return }
            emit(format == .json ? raw : Self.text(event))
            try state.advance(to: event.seq)
        case .snapshot(let carts, let seq, let reason, let more):
            let whole: (snapshot: CartSnapshot, reason: SnapshotReason)?
            do {
                whole = try snapshot.add(carts: carts, seq: seq, reason: reason, more: more)
            } catch {
                throw ProtocolViolation(description: error.description)
            }
            emit(format == .json ? raw : Self.text(snapshotPart: carts, seq: seq, reason: reason, more: more, whole: whole?.snapshot))
            // Only the last part completes the snapshot: resuming after its seq before then
            // would skip the carts of the parts not yet received.
            if whole != nil { try state.advance(to: seq) }
        case .error(let code, let message):
            FileHandle.standardError.write(Data("fanout-client: server error \(code): \(message)\n".utf8))
        case .welcome:
            // A new connection: parts of a snapshot cut short by a disconnect are dropped.
            snapshot = SnapshotAssembly()
        case .heartbeat:
            break
        }
    }

    private func emit(_ line: String) {
        output.write(Data((line + "\n").utf8))
    }

    /// One part of a snapshot; a snapshot in one part reads as it always did.
    static func text(snapshotPart carts: [Cart], seq: Int64, reason: SnapshotReason, more: Bool, whole: CartSnapshot?) -> String {
        let head =
            switch (more, whole) {
            case (false, let whole?) where whole.carts.count == carts.count:
                "snapshot at seq \(seq) (\(reason.rawValue)): \(carts.count) carts"
            case (false, let whole):
                "snapshot at seq \(seq) (\(reason.rawValue)), last part: \(carts.count) carts, \(whole?.carts.count ?? carts.count) in all"
            case (true, _):
                "snapshot at seq \(seq) (\(reason.rawValue)), part: \(carts.count) carts, more follow"
            }
        return head + carts.map { "\n  \($0.id) v\($0.version): \($0.itemCount) items" }.joined()
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

extension SubscriberSession.Transport: ExpressibleByArgument {}

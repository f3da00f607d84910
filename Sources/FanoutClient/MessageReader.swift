import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// Decodes messages and puts snapshot parts together for one connection.
struct MessageReader {
    let handle: @Sendable (FanoutSubscription.Update) async throws -> Void
    let received: Counter
    /// The subscription asked for presence: an error refusing it, before the subscription
    /// was accepted, is a `PresenceRefusal`.
    var presenceAsked = false
    /// Something of the subscription came (a snapshot part, an event, presence): it was accepted.
    private var accepted = false
    /// The last seq handed on by the streams of one handover (events at or below it are not
    /// handed on again); nil outside one.
    var delivered: DeliveredSeq?
    var parts = SnapshotAssembly()

    init(
        handle: @escaping @Sendable (FanoutSubscription.Update) async throws -> Void, received: Counter, presenceAsked: Bool = false,
        delivered: DeliveredSeq? = nil
    ) {
        self.handle = handle
        self.received = received
        self.presenceAsked = presenceAsked
        self.delivered = delivered
    }

    func read(_ text: String) throws -> ServerMessage {
        do {
            let message = try FanoutJSON.decoder().decode(ServerMessage.self, from: Data(text.utf8))
            received.increment()
            return message
        } catch {
            throw ProtocolViolation(description: "not a server message: \(text.prefix(80))")
        }
    }

    mutating func deliver(_ message: ServerMessage, raw: String) async throws {
        switch message {
        case .welcome(let welcome):
            try await handle(.welcome(welcome))
        case .snapshot(let carts, let seq, let reason, let more):
            accepted = true
            let whole: (snapshot: CartSnapshot, reason: SnapshotReason)?
            do {
                whole = try parts.add(carts: carts, seq: seq, reason: reason, more: more)
            } catch {
                throw ProtocolViolation(description: error.description)
            }
            try await handle(.snapshotPart(carts: carts, seq: seq, reason: reason, more: more, raw: raw))
            if let whole {
                try await handle(.snapshot(whole.snapshot, reason: whole.reason))
                delivered?.advance(to: whole.snapshot.seq)
            }
        case .event(let event):
            guard !parts.isIncomplete else {
                throw ProtocolViolation(description: "event \(event.seq) arrived before the last part of the snapshot")
            }
            accepted = true
            if let delivered, let last = delivered.seq, event.seq <= last { return }
            try await handle(.event(event, raw: raw))
            delivered?.advance(to: event.seq)
        case .error(let code, let message):
            if presenceAsked, !accepted, let known = FanoutErrorCode(rawValue: code), known.refusesPresence {
                throw PresenceRefusal(
                    error: .refused(status: known.httpStatus ?? 400, code: known, rawCode: code, message: message))
            }
            try await handle(.serverError(code: code, message: message))
        case .presence, .presenceJoin, .presenceUpdate, .presenceLeave:
            accepted = true
            try await handle(.presence(message, raw: raw))
        case .heartbeat:
            break
        }
    }
}

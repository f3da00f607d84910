import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import FanoutClient

/// How one connection's messages become subscription updates: snapshot parts put together.
@Suite("Message reader")
struct MessageReaderTests {
    static func text(_ message: ServerMessage) throws -> String {
        String(decoding: try FanoutJSON.encoder().encode(message), as: UTF8.self)
    }

    static func reader() -> (MessageReader, NIOLockedValueBox<[String]>) {
        let seen = NIOLockedValueBox<[String]>([])
        let reader = MessageReader(
            handle: { update in
                let name =
                    switch update {
                    case .snapshotPart(_, _, _, let more, _): more ? "part" : "last part"
                    case .snapshot(let snapshot, _): "snapshot \(snapshot.seq) of \(snapshot.carts.count)"
                    case .event(let event, _): "event \(event.seq)"
                    case .presence: "presence"
                    case .serverError(let code, _): "error \(code)"
                    default: "other"
                    }
                seen.withLockedValue { $0.append(name) }
            }, received: Counter())
        return (reader, seen)
    }

    static func event(_ seq: Int64) -> ServerMessage {
        .event(CartEvent(seq: seq, cartID: "a", change: .cartCleared, version: seq, committedAt: Date(timeIntervalSince1970: 0)))
    }

    @Test func partsBecomeOneSnapshotThenEvents() async throws {
        var (reader, seen) = Self.reader()
        for message in [
            ServerMessage.snapshot(carts: [Cart(id: "a"), Cart(id: "b")], seq: 12, reason: .initial, more: true),
            .snapshot(carts: [Cart(id: "c")], seq: 12, reason: .initial, more: false), Self.event(13),
        ] {
            let text = try Self.text(message)
            try await reader.deliver(try reader.read(text), raw: text)
        }
        #expect(seen.withLockedValue { $0 } == ["part", "last part", "snapshot 12 of 3", "event 13"])
    }

    /// A presence refusal before anything of the subscription is the subscription's cue to go
    /// on without presence; the same code later (a refused state change) is only reported.
    @Test func aPresenceRefusalBeforeTheSubscriptionIsOneAndLaterIsAnError() async throws {
        var (reader, seen) = Self.reader()
        reader.presenceAsked = true
        let full = try Self.text(.error(FanoutError(.presenceFull, "full")))
        await #expect(throws: PresenceRefusal.self) { try await reader.deliver(try reader.read(full), raw: full) }
        let presence = try Self.text(.presence(cartID: "a", members: []))
        try await reader.deliver(try reader.read(presence), raw: presence)
        let refusedState = try Self.text(.error(FanoutError(.invalidPresenceState, "too large")))
        try await reader.deliver(try reader.read(refusedState), raw: refusedState)
        #expect(seen.withLockedValue { $0 } == ["presence", "error invalid_presence_state"])
    }

    @Test func anEventBeforeTheLastPartBreaksTheProtocol() async throws {
        var (reader, _) = Self.reader()
        let part = try Self.text(.snapshot(carts: [Cart(id: "a")], seq: 12, reason: .initial, more: true))
        try await reader.deliver(try reader.read(part), raw: part)
        let event = try Self.text(Self.event(13))
        await #expect(throws: ProtocolViolation.self) { try await reader.deliver(try reader.read(event), raw: event) }
        #expect(throws: ProtocolViolation.self) { try reader.read("not json") }
    }
}

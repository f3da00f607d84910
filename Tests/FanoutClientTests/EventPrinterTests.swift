import FanoutProtocol
import Foundation
import Testing

@testable import fanout_client

/// What `fanout-client subscribe` prints and resumes after, fed server messages directly.
@Suite("Event printer")
struct EventPrinterTests {
    static func printer(format: SubscribeCommand.Format = .json) throws -> (EventPrinter, SeqState) {
        let state = try SeqState(stateFile: nil, since: nil)
        return (EventPrinter(format: format, state: state, output: FileHandle(forWritingAtPath: "/dev/null")!), state)
    }

    static func event(_ seq: Int64) -> ServerMessage {
        .event(CartEvent(seq: seq, cartID: "a", change: .cartCleared, version: seq, committedAt: Date(timeIntervalSince1970: 0)))
    }

    static func part(_ ids: [String], seq: Int64, more: Bool) -> ServerMessage {
        .snapshot(carts: ids.map { Cart(id: $0) }, seq: seq, reason: .initial, more: more)
    }

    @Test func aSnapshotInPartsIsSeenOnlyAfterItsLastPart() throws {
        let (printer, state) = try Self.printer()
        try printer.handle(Self.part(["a", "b"], seq: 12, more: true), raw: "{}")
        #expect(state.last == nil, "a disconnect now must not resume after 12: the carts of the other parts were never received")
        try printer.handle(Self.part(["c"], seq: 12, more: true), raw: "{}")
        #expect(state.last == nil)
        try printer.handle(Self.part(["d"], seq: 12, more: false), raw: "{}")
        #expect(state.last == 12)
        try printer.handle(Self.event(13), raw: "{}")
        #expect(state.last == 13)
    }

    @Test func anEventBeforeTheLastPartBreaksTheProtocol() throws {
        let (printer, state) = try Self.printer()
        try printer.handle(Self.part(["a"], seq: 12, more: true), raw: "{}")
        #expect(throws: ProtocolViolation.self) { try printer.handle(Self.event(13), raw: "{}") }
        #expect(state.last == nil)
        // The next connection starts over with its welcome; its snapshot counts on its own.
        try printer.handle(.welcome(.init(subscriberID: "s", heartbeatInterval: 1, leaseTTL: 3, latestSeq: 13)), raw: "{}")
        try printer.handle(Self.part(["a"], seq: 13, more: false), raw: "{}")
        #expect(state.last == 13)
    }

    @Test func textNamesTheParts() {
        let one = EventPrinter.text(
            snapshotPart: [Cart(id: "a")], seq: 3, reason: .initial, more: false,
            whole: CartSnapshot(carts: [Cart(id: "a")], seq: 3))
        #expect(one == "snapshot at seq 3 (initial): 1 carts\n  a v0: 0 items")
        let first = EventPrinter.text(snapshotPart: [Cart(id: "a")], seq: 3, reason: .initial, more: true, whole: nil)
        #expect(first.hasPrefix("snapshot at seq 3 (initial), part: 1 carts, more follow"))
        let last = EventPrinter.text(
            snapshotPart: [Cart(id: "b")], seq: 3, reason: .initial, more: false,
            whole: CartSnapshot(carts: [Cart(id: "a"), Cart(id: "b")], seq: 3))
        #expect(last.hasPrefix("snapshot at seq 3 (initial), last part: 1 carts, 2 in all"))
    }
}

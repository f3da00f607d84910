import FanoutClient
import FanoutProtocol
import Foundation
import Testing

@testable import fanout_client

/// What `fanout-client subscribe` prints and resumes after, fed subscription updates directly.
@Suite("Event printer")
struct EventPrinterTests {
    static func printer(format: SubscribeCommand.Format = .json) -> (EventPrinter, MemoryResumePosition) {
        let position = MemoryResumePosition()
        let output = FileHandle(forWritingAtPath: "/dev/null")!
        return (EventPrinter(format: format, position: position, start: nil, output: output), position)
    }

    static func event(_ seq: Int64) -> FanoutSubscription.Update {
        .event(CartEvent(seq: seq, cartID: "a", change: .cartCleared, version: seq, committedAt: Date(timeIntervalSince1970: 0)), raw: "{}")
    }

    static func part(_ ids: [String], seq: Int64, more: Bool) -> FanoutSubscription.Update {
        .snapshotPart(carts: ids.map { Cart(id: $0) }, seq: seq, reason: .initial, more: more, raw: "{}")
    }

    @Test func aSnapshotInPartsIsSeenOnlyAfterItsLastPart() throws {
        let (printer, position) = Self.printer()
        try printer.handle(Self.part(["a", "b"], seq: 12, more: true))
        #expect(position.last == nil, "a disconnect now must not resume after 12: the carts of the other parts were never received")
        try printer.handle(Self.part(["c"], seq: 12, more: false))
        #expect(position.last == nil)
        try printer.handle(.snapshot(CartSnapshot(carts: [], seq: 12), reason: .initial))
        #expect(position.last == 12)
        try printer.handle(Self.event(13))
        #expect(position.last == 13 && printer.last == 13)
        try printer.handle(Self.event(13))
        #expect(position.last == 13, "an event at or before the last printed one is skipped")
    }

    /// The state file keeps the seq and its database; an older file of a seq alone is read
    /// (its database taken from the first server), and another database makes it start over.
    @Test func aStateFileKeepsTheSeqWithItsDatabaseAndForgetsItOnAnother() throws {
        let file = FileManager.default.temporaryDirectory.appending(path: "fanout-state-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        let (first, second) = (UUID().uuidString.lowercased(), UUID().uuidString.lowercased())
        try Data("41\n".utf8).write(to: file)
        let older = try FileResumePosition(file: file)
        #expect(older.last == 41 && older.databaseID == nil)
        #expect(try older.use(databaseID: first), "an older file's seq is taken on the first database it meets")
        try older.advance(to: 42)
        #expect(try String(contentsOf: file, encoding: .utf8) == "42 \(first)\n")

        let reread = try FileResumePosition(file: file)
        #expect(reread.last == 42 && reread.databaseID == first)
        #expect(try reread.use(databaseID: first))
        #expect(try !reread.use(databaseID: second), "another database")
        #expect(reread.last == nil, "its seq forgotten")
        #expect(try FileResumePosition(file: file).last == nil, "in the file too")
        try reread.advance(to: 3)
        #expect(try FileResumePosition(file: file).databaseID == second)

        try Data("42 not-an-identity\n".utf8).write(to: file)
        #expect(throws: RemoteStoreError.self) { try FileResumePosition(file: file) }
    }

    @Test func aWelcomeFromAnotherDatabaseMakesThePrinterStartOver() throws {
        let position = MemoryResumePosition(5, databaseID: "old")
        let printer = EventPrinter(format: .json, position: position, start: 5, output: FileHandle(forWritingAtPath: "/dev/null")!)
        let welcome = { (databaseID: String) in
            FanoutSubscription.Update.welcome(
                .init(subscriberID: "s", heartbeatInterval: 5, leaseTTL: 15, latestSeq: 8, databaseID: databaseID))
        }
        try printer.handle(welcome("old"))
        #expect(printer.last == 5, "the same database: resumed after its seq")
        #expect(throws: EventPrinter.OtherDatabase.self) { try printer.handle(welcome("new")) }
        #expect(printer.last == nil && position.last == nil, "the next subscription asks for a snapshot")
        try printer.handle(welcome("new"))
        #expect(position.databaseID == "new")
    }

    @Test func presenceReadsAsWhoJoinedChangedAndLeft() {
        let since = Date(timeIntervalSince1970: 0)
        let ann = PresenceMember(user: "ann", member: "ipad-1", state: ["editing": true], since: since)
        let anonymous = PresenceMember(user: nil, member: "tab-2", since: since)
        #expect(
            EventPrinter.text(presence: .presence(cartID: "a", members: [ann, anonymous]))
                == #"presence a: ann/ipad-1 {"editing":true}, tab-2"#)
        #expect(EventPrinter.text(presence: .presence(cartID: "a", members: [])) == "presence a: nobody")
        #expect(EventPrinter.text(presence: .presenceJoin(cartID: "a", member: anonymous)) == "joined a: tab-2")
        #expect(EventPrinter.text(presence: .presenceUpdate(cartID: "a", member: ann)) == #"updated a: ann/ipad-1 {"editing":true}"#)
        #expect(
            EventPrinter.text(presence: .presenceLeave(cartID: "a", member: ann.id, reason: .leaseExpired))
                == "left a: ann/ipad-1 (lease_expired)")
    }

    @Test func aRefusalEndsTheProgramWithTheServersCode() {
        let (printer, _) = Self.printer()
        let refusal = RemoteStoreError.refused(status: 401, code: .badToken, rawCode: "bad_token", message: "no")
        #expect(throws: ClientFailure.self) { try printer.handle(.refused(refusal, retryIn: .seconds(30))) }
    }

    @Test func textNamesTheParts() {
        let one = EventPrinter.text(snapshotPart: [Cart(id: "a")], seq: 3, reason: .initial, more: false, total: 1)
        #expect(one == "snapshot at seq 3 (initial): 1 carts\n  a v0: 0 items")
        let first = EventPrinter.text(snapshotPart: [Cart(id: "a")], seq: 3, reason: .initial, more: true, total: 1)
        #expect(first.hasPrefix("snapshot at seq 3 (initial), part: 1 carts, more follow"))
        let last = EventPrinter.text(snapshotPart: [Cart(id: "b")], seq: 3, reason: .initial, more: false, total: 2)
        #expect(last.hasPrefix("snapshot at seq 3 (initial), last part: 1 carts, 2 in all"))
    }
}

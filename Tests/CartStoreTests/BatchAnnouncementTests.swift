import CartStore
import FanoutProtocol
import Foundation
import Testing

@testable import CartStorePostgres

/// What a PostgreSQL batch's notification carries, and what a follower may take from it.
@Suite("PostgreSQL batch announcement")
struct BatchAnnouncementTests {
    static func events(after previous: Int64, _ count: Int, name: String? = nil) -> [CartEvent] {
        (1...count).map { index in
            let item = CartItem(sku: "s\(index)", quantity: index, unitPriceCents: 5, name: name ?? "tab\there \"quoted\"\nline")
            return CartEvent(
                seq: previous + Int64(index), cartID: "c\(index % 3)", change: .itemAdded(item: item, addedQuantity: index),
                version: Int64(index), committedAt: Date(millisecondsSince1970: 1_700_000_000_000 + Int64(index)))
        }
    }

    static func payload(_ events: [CartEvent], previous: Int64) -> String {
        BatchAnnouncement.payload(
            previous: previous, latest: previous + Int64(events.count), events: events, changes: events.map { EventJSON.change($0.change) })
    }

    @Test func aBatchThatFitsIsReadBackWhole() throws {
        let events = Self.events(after: 41, 5)
        let announcement = try #require(BatchAnnouncement(Self.payload(events, previous: 41)))
        #expect(announcement.previous == 41)
        #expect(announcement.latest == 46)
        #expect(announcement.events() == events, "the same events, names with tabs, quotes and newlines included")
        #expect(announcement.events()?.map(\.encodedChange) == events.map { EventJSON.change($0.change) })
    }

    /// A keyed write's event carries its key across servers; a line without one (an older
    /// server's, or an event without a key) is read as before.
    @Test func anEventsIdempotencyKeyTravelsAndAnOlderLineStillReads() throws {
        var events = Self.events(after: 9, 3)
        events[1].idempotencyKey = "order-7:\"retry\"~"
        let payload = Self.payload(events, previous: 9)
        #expect(payload.split(separator: "\n")[2].hasSuffix("\torder-7:\"retry\"~"))
        let announcement = try #require(BatchAnnouncement(payload))
        #expect(announcement.events() == events)
        #expect(announcement.events()?.map(\.idempotencyKey) == [nil, "order-7:\"retry\"~", nil])
        // As a server without keys wrote it: five fields a line.
        let older = "9 10\n10\tc1\t1\t1700000000001\t" + EventJSON.change(.cartCleared)
        let olderAnnouncement = try #require(BatchAnnouncement(older))
        let read = try #require(olderAnnouncement.events())
        #expect(read.map(\.seq) == [10])
        #expect(read.first?.idempotencyKey == nil)
    }

    @Test func aBatchTooLargeForANotificationCarriesOnlyItsSeqs() throws {
        let events = Self.events(after: 0, 64, name: String(repeating: "n", count: 200))
        let payload = Self.payload(events, previous: 0)
        #expect(payload == "0 64")
        #expect(payload.utf8.count <= BatchAnnouncement.maxBytes)
        let announcement = try #require(BatchAnnouncement(payload))
        #expect(announcement.latest == 64)
        #expect(announcement.events() == nil, "the follower reads the log")
    }

    @Test func anOlderServersBareSeqIsADoorbell() throws {
        let announcement = try #require(BatchAnnouncement("17"))
        #expect(announcement.previous == nil)
        #expect(announcement.latest == 17)
        #expect(announcement.events() == nil)
    }

    @Test func anythingElseIsNoAnnouncementOrNoEvents() throws {
        #expect(BatchAnnouncement("") == nil)
        #expect(BatchAnnouncement("seventeen") == nil)
        #expect(BatchAnnouncement("1 2 3") == nil)
        #expect(try #require(BatchAnnouncement("3 5\nnot\tan\tevent")).events() == nil)
        // Events that are not exactly the seqs after `previous`: the log is read instead.
        let events = Self.events(after: 3, 2)
        let missing = "3 6\n" + Self.payload(events, previous: 3).split(separator: "\n").dropFirst().joined(separator: "\n")
        #expect(try #require(BatchAnnouncement(missing)).events() == nil)
        // A head claiming far more events than its lines (anyone may NOTIFY the channel): no
        // events, and nothing sized by the claim.
        let line = Self.payload(Self.events(after: 0, 1), previous: 0).split(separator: "\n")[1]
        #expect(try #require(BatchAnnouncement("0 \(Int64.max)\n\(line)")).events() == nil)
        #expect(try #require(BatchAnnouncement("\(Int64.min) \(Int64.max)\n\(line)")).events() == nil)
        let negative = "-2 \(Int64.max)\n-1\tc\t1\t0\t{\"kind\":\"cartCleared\"}"
        #expect(try #require(BatchAnnouncement(negative)).events() == nil, "a span past Int64.max")
        let last = try #require(BatchAnnouncement("\(Int64.max - 1) \(Int64.max)\n\(Int64.max)\tc\t1\t0\t{\"kind\":\"cartCleared\"}"))
        #expect(last.events()?.map(\.seq) == [Int64.max], "the last seq there can be reads as any other")
    }
}

import FanoutProtocol
import Foundation
import Testing

@testable import FanoutServer

/// The buffer between the hub's calls and the presence's writer: one wish per key, bounded.
@Suite struct PostgresPresenceWritesTests {
    let record = PresenceMember(user: "u", member: "m", state: [:], since: .milliseconds(1))

    @Test func theNewestWishForAKeyReplacesTheOlder() {
        var writes = PresenceWrites()
        writes.set(record, cart: "c")
        var changed = record
        changed.state = ["a": 1]
        writes.set(changed, cart: "c")
        #expect(writes.pending == [key(record): .hold(changed)])
        writes.remove(key(record), reason: .closed)
        #expect(writes.pending == [key(record): .leave(reason: .closed)])
        #expect(writes.held.isEmpty)
    }

    @Test func aFailedWriteIsPutBackUnderNewerWishesAndRewritesEverythingNext() {
        var writes = PresenceWrites()
        let other = PresenceMember(user: "u", member: "other", state: [:], since: .milliseconds(1))
        writes.set(record, cart: "c")
        writes.set(other, cart: "c")
        #expect(writes.take().rewrite, "the first write writes everything")
        #expect(!writes.hasWork)
        writes.remove(key(other), reason: .closed)
        let batch = writes.take()
        #expect(!batch.rewrite)
        #expect(batch.rows(everything: false).leaves.map(\.1) == [.closed])
        #expect(batch.rows(everything: true).holds.map(\.presenceMember) == [record], "everything: what is held, and the leaves")
        writes.set(other, cart: "c")  // back while the write was under way
        writes.putBack(batch)
        #expect(writes.pending == [key(other): .hold(other)], "the newer wish kept")
        #expect(writes.take().rewrite)
    }

    @Test func leavesPastTheLimitAreDroppedForARewrite() {
        var writes = PresenceWrites()
        writes.set(record, cart: "c")
        _ = writes.take()
        for index in 0...PresenceWrites.leaveLimit {
            writes.remove(PresenceRegistry.Key(cart: "c", .init(user: "u", member: "m\(index)")), reason: .closed)
        }
        #expect(writes.pending.isEmpty, "the leaves dropped")
        let batch = writes.take()
        #expect(batch.rewrite, "the rewrite marks their rows left")
        #expect(batch.rows(everything: true).holds.map(\.presenceMember) == [record])
    }
}

/// A member's place on cart `c`, where the tests put their members.
func key(_ member: PresenceMember) -> PresenceRegistry.Key {
    PresenceRegistry.Key(cart: "c", member.id)
}

extension Date {
    /// `milliseconds` since 1970: the precision the database keeps a member's `since` at.
    static func milliseconds(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
    }
}

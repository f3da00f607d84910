import Testing

@testable import FanoutServer

/// The buffer between the hub's calls and the presence's writer: one wish per key, bounded.
@Suite struct PostgresPresenceWritesTests {
    let record = PresenceRecord(cartID: "c", user: "u", member: "m", state: "{}", since: 1)

    @Test func theNewestWishForAKeyReplacesTheOlder() {
        var writes = PresenceWrites()
        writes.set(record)
        var changed = record
        changed.state = #"{"a":1}"#
        writes.set(changed)
        #expect(writes.pending == [record.key: .hold(changed)])
        writes.remove(record.key, reason: "closed")
        #expect(writes.pending == [record.key: .leave(reason: "closed")])
        #expect(writes.held.isEmpty)
    }

    @Test func aFailedWriteIsPutBackUnderNewerWishesAndRewritesEverythingNext() {
        var writes = PresenceWrites()
        let other = PresenceRecord(cartID: "c", user: "u", member: "other", state: "{}", since: 1)
        writes.set(record)
        writes.set(other)
        #expect(writes.take().rewrite, "the first write writes everything")
        #expect(!writes.hasWork)
        writes.remove(other.key, reason: "closed")
        let batch = writes.take()
        #expect(!batch.rewrite)
        #expect(batch.rows(everything: false).leaves.map(\.1) == ["closed"])
        #expect(batch.rows(everything: true).holds == [record], "everything: what is held, and the leaves")
        writes.set(other)  // back while the write was under way
        writes.putBack(batch)
        #expect(writes.pending == [other.key: .hold(other)], "the newer wish kept")
        #expect(writes.take().rewrite)
    }

    @Test func leavesPastTheLimitAreDroppedForARewrite() {
        var writes = PresenceWrites()
        writes.set(record)
        _ = writes.take()
        for index in 0...PresenceWrites.leaveLimit {
            writes.remove(PresenceKey(cartID: "c", user: "u", member: "m\(index)"), reason: "closed")
        }
        #expect(writes.pending.isEmpty, "the leaves dropped")
        let batch = writes.take()
        #expect(batch.rewrite, "the rewrite marks their rows left")
        #expect(batch.rows(everything: true).holds == [record])
    }
}

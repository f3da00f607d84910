import Testing

@testable import FanoutConcurrency

/// The one run of consecutive seqs in memory that the SQLite writer's recent events and the
/// server's live ring both keep.
@Suite("A run of consecutive seqs")
struct SeqRunTests {
    struct Item: Sequenced, Equatable {
        let seq: Int64
    }

    static func run(_ seqs: ClosedRange<Int64>, capacity: Int = 100) -> SeqRun<Item> {
        var run = SeqRun<Item>(capacity: capacity)
        for seq in seqs { run.append(Item(seq: seq)) }
        return run
    }

    @Test func fullItForgetsTheOldestAndKeepsTheNewest() {
        let run = Self.run(1...10, capacity: 4)
        #expect(run.count == 4)
        #expect(run.oldestSeq == 7)
        #expect(run.newestSeq == 10)
        #expect(run.elements(after: 6).map(\.seq) == [7, 8, 9, 10])
    }

    @Test func aSeqThatDoesNotFollowStartsTheRunAgain() {
        var run = Self.run(1...5)
        run.append(Item(seq: 9))
        #expect(run.oldestSeq == 9)
        #expect(run.count == 1)
        // What came before the gap is not answered from here: a reader at 5 reads the log.
        #expect(!run.holdsEverything(after: 5))
        #expect(run.holdsEverything(after: 8))
    }

    @Test func itHoldsWhatFollowsFromTheOneBeforeTheOldestToTheNewest() {
        let run = Self.run(11...20)
        #expect(run.holdsEverything(after: 10))
        #expect(run.holdsEverything(after: 20))
        #expect(!run.holdsEverything(after: 9), "event 10 is not held")
        #expect(!run.holdsEverything(after: 21), "past the newest: only the log can say")
        #expect(!run.holdsEverything(after: .max))
        #expect(!run.holdsEverything(after: .min))
        #expect(!SeqRun<Item>(capacity: 4).holdsEverything(after: 0), "an empty run holds nothing")
    }

    @Test func theElementsAfterASeqAreTheRunsTailFromIt() {
        let run = Self.run(11...20)
        for seq in Int64(10)...21 {
            #expect(run.elements(after: seq).map(\.seq) == Array(11...20).filter { $0 > seq }, "after \(seq)")
        }
        #expect(run.elements(after: .max).isEmpty)
        #expect(run.elements(after: .min).map(\.seq) == Array(11...20))
        #expect(SeqRun<Item>(capacity: 4).elements(after: 0).isEmpty)
    }

    @Test func removingAllLeavesAnEmptyRunThatStartsAnywhere() {
        var run = Self.run(1...3)
        run.removeAll()
        #expect(run.count == 0 && run.oldestSeq == nil && run.newestSeq == nil)
        run.append(Item(seq: 42))
        #expect(run.oldestSeq == 42 && run.holdsEverything(after: 41))
    }
}

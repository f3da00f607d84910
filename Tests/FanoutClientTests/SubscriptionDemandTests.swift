import FanoutProtocol
import Testing

@testable import FanoutClient

/// The store's connection follows what its observers want, whatever the order of its start-up
/// steps: each ordering played on the state machine the store consults after every step.
@Suite("Subscription demand")
struct SubscriptionDemandTests {
    static let alice = CartSelection.only(["alice"])

    /// `wake(toFollow:refusalExpired:)`, as an expression a check can hold.
    static func wakes(_ demand: inout SubscriptionDemand, toFollow wanted: CartSelection?, refusalExpired: Bool = false) -> Bool {
        demand.wake(toFollow: wanted, refusalExpired: refusalExpired)
    }

    /// Plays `steps` from a store just made, as the store does (after each step it asks whether
    /// to wake the loop; a woken loop plans again from what is wanted then, at the next
    /// "loop acts" or at the end); returns where the loop ends and how often it was woken.
    static func play(_ steps: [String]) -> (loop: SubscriptionDemand.Loop, wakeUps: Int) {
        var demand = SubscriptionDemand()
        var wanted: CartSelection?
        var wakeUps = 0
        /// A wake-up the loop has not acted on yet.
        var pendingWakeUp = false
        func reconsider() {
            if demand.wake(toFollow: wanted) {
                wakeUps += 1
                pendingWakeUp = true
            }
        }
        func plan() {
            demand.beginPlanning(wanted)
            pendingWakeUp = false
            demand.planned(wanted)
            reconsider()
        }
        for step in steps {
            switch step {
            // The cache is restored before the loop starts: it changes neither side.
            case "restore cache": break
            case "first plan", "plan": plan()
            case "add alice":
                wanted = alice
                reconsider()
            case "release all":
                wanted = nil
                reconsider()
            case "loop acts":
                if pendingWakeUp { plan() }
            default: Issue.record("unknown step \(step)")
            }
        }
        if pendingWakeUp { plan() }
        return (demand.loop, wakeUps)
    }

    @Test(arguments: [
        // The outside package's cold start: cache, the loop's first plan (nothing wanted yet), then
        // the first observer. It stayed idle for good.
        ["restore cache", "first plan", "add alice"],
        ["restore cache", "add alice", "first plan"],
        ["first plan", "add alice"],
        ["add alice", "first plan"],
        ["restore cache", "first plan", "add alice", "release all", "loop acts", "add alice"],
        ["restore cache", "first plan", "release all", "add alice"],
    ])
    func everyOrderingEndsFollowingWhatTheObserverWants(steps: [String]) {
        #expect(Self.play(steps).loop == .following(Self.alice))
    }

    @Test func aReleasedLastObserverEndsTheConnection() {
        #expect(Self.play(["add alice", "first plan", "release all"]).loop == .idle)
    }

    @Test func anObserverAddedBeforeTheFirstPlanCostsNoSecondConnection() {
        #expect(Self.play(["restore cache", "add alice", "first plan"]).wakeUps == 0)
        #expect(Self.play(["restore cache", "first plan", "add alice"]).wakeUps == 1)
    }

    @Test func aChangeWhilePlanningWakesTheLoopOnceItHasPlanned() {
        var demand = SubscriptionDemand()
        demand.beginPlanning(nil)
        // An observer arrives while the plan (made for nothing) is being made.
        #expect(Self.wakes(&demand, toFollow: Self.alice), "woken at once: its connection will be cut short")
        #expect(!Self.wakes(&demand, toFollow: Self.alice), "once until the loop plans again")
        demand.planned(nil)
        #expect(!Self.wakes(&demand, toFollow: Self.alice), "the wake-up already asked for stands")
        demand.beginPlanning(Self.alice)
        demand.planned(Self.alice)
        #expect(!Self.wakes(&demand, toFollow: Self.alice))
        #expect(demand.loop == .following(Self.alice))
    }

    @Test func aPlanThatFailedIsWokenByAnotherWish() {
        var demand = SubscriptionDemand()
        demand.beginPlanning(Self.alice)
        // The plan threw (a read failed): the loop pauses with its state `planning(alice)`.
        #expect(!Self.wakes(&demand, toFollow: Self.alice))
        #expect(Self.wakes(&demand, toFollow: .only(["alice", "bob"])))
    }

    @Test func noCartsIsNothingToFollow() {
        var demand = SubscriptionDemand()
        demand.beginPlanning(.carts([]))
        demand.planned(nil)
        #expect(demand.loop == .idle)
        #expect(!Self.wakes(&demand, toFollow: .carts([])), "every cart refused: no connection, and no wake-up loop")
    }

    @Test func anExpiredRefusalWakesTheLoopButNotBeforeItStarts() {
        var demand = SubscriptionDemand()
        #expect(!Self.wakes(&demand, toFollow: nil, refusalExpired: true))
        demand.beginPlanning(.carts([]))
        demand.planned(nil)
        #expect(Self.wakes(&demand, toFollow: .carts([]), refusalExpired: true))
    }

    @Test func startingIsNeverWoken() {
        var demand = SubscriptionDemand()
        #expect(!Self.wakes(&demand, toFollow: Self.alice), "its first plan reads what is wanted")
        #expect(demand.loop == .starting)
    }

    @Test func whatIsWantedNeedNotBeReadWhileNoWakeUpCanFollow() {
        var demand = SubscriptionDemand()
        #expect(!demand.mayWake, "before the first plan")
        demand.beginPlanning(nil)
        demand.planned(nil)
        #expect(demand.mayWake)
        #expect(Self.wakes(&demand, toFollow: Self.alice))
        #expect(!demand.mayWake, "a wake-up is asked for: the next plan reads everything")
        demand.beginPlanning(Self.alice)
        #expect(demand.mayWake)
    }
}

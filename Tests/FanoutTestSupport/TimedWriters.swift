import NIOConcurrencyHelpers

/// Writers that each make one change after another until stopped, timing every answer: what a
/// test of a failing database asks is that no change waits without end.
public final class TimedWriters: Sendable {
    /// The README's bound on a change's answer while the database fails (5 s), with room for a
    /// loaded machine.
    public static let bound: Duration = .seconds(8)

    /// How one change was answered.
    public enum Answer: Sendable {
        case made(seq: Int64)
        /// 503 `store_unavailable`.
        case unavailable
        case other(String)
    }

    public struct Outcome: Sendable, CustomStringConvertible {
        public var acknowledged: [Int64] = []
        public var unavailable = 0
        public var otherAnswers: [String] = []
        public var longest: Duration = .zero
        /// How long each `unavailable` took, in order of answer.
        public var unavailableAfter: [Duration] = []
        /// Changes still waiting when the writers were stopped and given `bound` to finish.
        public var unanswered = 0
        public var description: String {
            let sorted = unavailableAfter.sorted()
            let median = sorted.isEmpty ? "-" : "\(sorted[sorted.count / 2])"
            return "\(acknowledged.count) made, \(unavailable) unavailable (p50 \(median), max \(sorted.last.map { "\($0)" } ?? "-")), "
                + "\(otherAnswers.count) other answers, \(unanswered) unanswered, longest \(longest)"
        }
    }

    private struct State {
        var outcome = Outcome()
        var inFlight: [Int: ContinuousClock.Instant] = [:]
        var stopped = false
    }
    private let state = NIOLockedValueBox(State())

    /// Starts `count` writers; `write` makes writer `writer`'s `index`th change.
    public init(count: Int, write: @escaping @Sendable (_ writer: Int, _ index: Int) async -> Answer) {
        for writer in 0..<count {
            Task { [state] in
                var index = 0
                while !state.withLockedValue({ $0.stopped }) {
                    let start = ContinuousClock.now
                    state.withLockedValue { $0.inFlight[writer] = start }
                    let answer = await write(writer, index)
                    let waited = start.duration(to: .now)
                    state.withLockedValue { state in
                        state.inFlight[writer] = nil
                        state.outcome.longest = max(state.outcome.longest, waited)
                        switch answer {
                        case .made(let seq): state.outcome.acknowledged.append(seq)
                        case .unavailable:
                            state.outcome.unavailable += 1
                            state.outcome.unavailableAfter.append(waited)
                        case .other(let text): state.outcome.otherAnswers.append(text)
                        }
                    }
                    index += 1
                }
            }
        }
    }

    /// How long the change waiting longest has waited so far.
    public var longestWaitInFlight: Duration {
        state.withLockedValue { state in state.inFlight.values.map { $0.duration(to: .now) }.max() ?? .zero }
    }

    /// What was answered so far.
    public var outcome: Outcome { state.withLockedValue { $0.outcome } }

    /// Stops the writers: waits `bound` at most for the changes under way, and counts the ones
    /// still waiting as unanswered.
    public func stop() async -> Outcome {
        state.withLockedValue { $0.stopped = true }
        let deadline = ContinuousClock.now + Self.bound
        while ContinuousClock.now < deadline, !state.withLockedValue({ $0.inFlight.isEmpty }) {
            try? await Task.sleep(for: .milliseconds(20))
        }
        return state.withLockedValue { state in
            var outcome = state.outcome
            outcome.unanswered = state.inFlight.count
            return outcome
        }
    }
}

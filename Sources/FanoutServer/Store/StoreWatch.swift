import CartStore
import FanoutProtocol
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Whether the store can take a change, as an operator acts on it, with a log line at each
/// change: `database lost` / `database back` (with `fanout.away_s`), `disk full` /
/// `disk writable again` (with `fanout.full_s`).
///
/// It probes only when there is a reason to: a change or `/healthz` refused for the store's
/// sake (`noticed`), or a new problem the engine kept (`CartStore.lastProblem`: the PostgreSQL
/// follower's, with nobody writing). Then it probes every second (`StoreHealth`, shared with
/// `/healthz`: the same probe answers both) until a change would go through again. A healthy
/// store is never probed by it: a probe commits as much as a change does.
actor StoreWatch: Service {
    enum Condition: Equatable {
        case writable
        /// The database cannot be reached or written (`store_unavailable`).
        case lost
        /// Its disk is full (`storage_full`).
        case full
    }

    private let store: CartStore
    private let health: StoreHealth
    private let logger: Logger
    /// How often it looks: for a nudge or a new problem while writable, and probes while not.
    private let interval: Duration
    private var condition = Condition.writable
    /// When the current trouble began (its first sign).
    private var troubleSince: ContinuousClock.Instant?
    /// `lastProblem.at` when last looked at.
    private var problemSeen: Int64?
    /// Set by `noticed`, from any thread; taken at the next look.
    private let nudged = Atomic<Bool>(false)

    init(store: CartStore, health: StoreHealth, logger: Logger, interval: Duration = .seconds(1)) {
        self.store = store
        self.health = health
        self.logger = logger
        self.interval = interval
        problemSeen = store.lastProblem?.at
    }

    /// A refusal for the store's sake was answered: look now, rather than wait for a problem
    /// to show otherwise.
    nonisolated func noticed(_ code: FanoutErrorCode) {
        guard code == .storeUnavailable || code == .storageFull else { return }
        nudged.store(true, ordering: .relaxed)
    }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while true {
                    try await Task.sleep(for: self.interval)
                    await self.look()
                }
            }
        } catch is CancellationError {
            // Shutting down.
        }
    }

    /// Probes if there is a reason to, and logs a change of condition.
    func look() async {
        let problem = store.lastProblem
        let newProblem = problem != nil && problem?.at != problemSeen
        problemSeen = problem?.at
        let wasNudged = nudged.exchange(false, ordering: .relaxed)
        guard condition != .writable || wasNudged || newProblem else { return }
        let now = ContinuousClock.now
        let found: (Condition, String?)
        do {
            try await health.check()
            found = (.writable, nil)
        } catch {
            let code = CartStoreError.code(error)
            // The engine's own account names the database (the log is the operator's); the
            // error callers get says only "the database".
            let reason = newProblem ? problem?.message : nil
            found = (code == .storageFull ? .full : .lost, reason ?? "\(error)")
        }
        change(to: found.0, reason: found.1, at: now)
    }

    private func change(to next: Condition, reason: String?, at now: ContinuousClock.Instant) {
        guard next != condition else { return }
        let previous = condition
        condition = next
        let lasted = troubleSince.map { String(format: "%.1f", Double(($0.duration(to: now)).milliseconds) / 1_000) }
        switch (previous, next) {
        case (_, .lost):
            troubleSince = troubleSince ?? now
            logger.warning("database lost", metadata: ["fanout.reason": "\(reason ?? "")"])
        case (_, .full):
            troubleSince = troubleSince ?? now
            logger.warning("disk full", metadata: ["fanout.reason": "\(reason ?? "")"])
        case (.lost, .writable):
            troubleSince = nil
            logger.notice("database back", metadata: ["fanout.away_s": "\(lasted ?? "0")"])
        case (.full, .writable):
            troubleSince = nil
            logger.notice("disk writable again", metadata: ["fanout.full_s": "\(lasted ?? "0")"])
        case (.writable, .writable):
            break
        }
    }
}

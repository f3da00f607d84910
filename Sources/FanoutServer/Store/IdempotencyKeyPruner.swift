import CartStore
import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Keeps the store's idempotency keys within `--idempotency-keys-ttl` and
/// `--idempotency-keys-max`: every `interval` (a tenth of the time to live, between 1 s and
/// 1 min) it forgets the keys older than the time to live, then all but the newest `maxKeys`.
/// A key is therefore answered again for at least its time to live (unless more than `maxKeys`
/// newer ones were made), and forgotten at most `interval` after. With several servers on one
/// PostgreSQL database each prunes the shared table: the same deletes, harmless twice.
struct IdempotencyKeyPruner: Service {
    let store: CartStore
    let timeToLive: Duration
    let maxKeys: Int
    let logger: Logger
    /// How many keys are kept, counted after each prune (and at start): `/metrics`
    /// `fanout_idempotency_keys`.
    let kept: NIOLockedValueBox<Int?>

    var interval: Duration { min(.seconds(60), max(.seconds(1), timeToLive / 10)) }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                await count()
                while true {
                    try await Task.sleep(for: interval)
                    await prune()
                    await count()
                }
            }
        } catch is CancellationError {
            // Shutting down.
        }
    }

    func count() async {
        if let count = try? await store.idempotencyKeyCount() { kept.withLockedValue { $0 = count } }
    }

    func prune() async {
        do {
            let forgotten = try await store.pruneIdempotencyKeys(
                createdBefore: Date(timeIntervalSinceNow: -timeToLive.seconds), keepingNewest: maxKeys)
            if forgotten > 0 { logger.debug("idempotency keys pruned", metadata: ["fanout.keys.pruned": "\(forgotten)"]) }
        } catch {
            logger.warning("idempotency keys not pruned", metadata: ["fanout.error": "\(error)"])
        }
    }
}

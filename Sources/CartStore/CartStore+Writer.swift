import FanoutProtocol
import Foundation

extension CartStore {
    /// Commits `write` to the cart, as `commit(_:to:expectedVersion:idempotencyKey:)` does,
    /// and returns it as a `RemoteCartStore` returns its writes: the one write API of
    /// `CartWriter`, for a view model that writes to either store. Its outcome is `confirmed`
    /// once this returns; what the store refuses is thrown (`CartStoreError`).
    @discardableResult
    public func write(_ write: CartWrite, to cartID: String, expectedVersion: Int64? = nil) async throws -> PendingWrite {
        let made = PendingWrite(
            id: UUID().uuidString.lowercased(), cartID: cartID, write: write, expectedVersion: expectedVersion, madeAt: Date())
        let committed = try await commit(write, to: cartID, expectedVersion: expectedVersion)
        writeOutcomes.withLockedValue { $0.note(made.id, seq: committed.event.seq) }
        return made
    }

    /// `confirmed` with its event's seq for one of the last 1 000 writes made with
    /// `write(_:to:expectedVersion:)`; `unknown` for any other.
    public func outcome(of write: PendingWrite) async -> WriteOutcome {
        writeOutcomes.withLockedValue { $0.seq(of: write.id) }.map { .confirmed(seq: $0) } ?? .unknown
    }
}

/// The seqs of a store's last writes, by id: at most `capacity`, the oldest forgotten first.
struct RecentWriteOutcomes {
    static let capacity = 1_000
    private var seqs: [String: Int64] = [:]
    private var order: [String] = []
    private var start = 0

    mutating func note(_ id: String, seq: Int64) {
        seqs[id] = seq
        order.append(id)
        if order.count - start > Self.capacity {
            seqs[order[start]] = nil
            start += 1
            // Drops the forgotten ids' slots now and then, not at each write.
            if start >= Self.capacity {
                order.removeFirst(start)
                start = 0
            }
        }
    }

    func seq(of id: String) -> Int64? { seqs[id] }
}

/// Puts a snapshot sent in parts (`ServerMessage.snapshot` with `more`) back together.
///
/// A client feeds it every snapshot part of one connection, in order. Only the last part
/// completes the snapshot: until then the client has not seen the snapshot's `seq` and must not
/// resume after it, nor apply events.
public struct SnapshotAssembly: Sendable {
    private var pending: (carts: [Cart], seq: Int64, reason: SnapshotReason)?

    public init() {}

    /// A snapshot has begun and its last part has not come yet.
    public var isIncomplete: Bool { pending != nil }

    /// Adds one part. Returns the whole snapshot (and why it was sent) after the last part, nil
    /// while more parts follow.
    ///
    /// - Throws: `SnapshotAssembly.Mismatch` when a part's seq or reason differs from the first
    ///   part's: the parts are not of one snapshot.
    public mutating func add(
        carts: [Cart], seq: Int64, reason: SnapshotReason, more: Bool
    ) throws(Mismatch) -> (snapshot: CartSnapshot, reason: SnapshotReason)? {
        var whole = pending ?? (carts: [], seq: seq, reason: reason)
        guard whole.seq == seq, whole.reason == reason else {
            pending = nil
            throw Mismatch(
                description:
                    "a snapshot part at seq \(seq) (\(reason.rawValue)) continues one at seq \(whole.seq) (\(whole.reason.rawValue))")
        }
        whole.carts += carts
        if more {
            pending = whole
            return nil
        }
        pending = nil
        return (CartSnapshot(carts: whole.carts, seq: seq), reason)
    }

    /// Parts that cannot belong to one snapshot.
    public struct Mismatch: Error, CustomStringConvertible {
        public let description: String
    }
}

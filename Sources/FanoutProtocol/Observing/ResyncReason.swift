/// Why an observer's carts were replaced by their state as it is now, instead of receiving the
/// events it missed (`CartObserver.cartSource(_:didResync:because:)`).
public enum ResyncReason: String, Sendable, Hashable {
    /// The server pruned the events after the replica's seq from its log.
    case historyPruned = "history_pruned"
    /// The server's log ends before the replica's seq: it is another database (or was restored
    /// from a backup).
    case otherDatabase = "other_database"
    /// An event did not follow the cart's version: the replica was rebuilt rather than trusted.
    case inconsistent
    /// An `updates` consumer fell behind its buffer: what it missed is summed up by the carts.
    case fellBehind = "fell_behind"
}

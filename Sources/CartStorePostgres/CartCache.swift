import CartStore
import NIOConcurrencyHelpers

/// The carts this server's batches planned on, kept so that the next batch need not read
/// their lines again: under the seq row a batch reads each cart's version only, and the lines
/// of a cart only when its version is not the one kept here (`PostgresBatch.load`). Reading a
/// cart's lines was most of a batch's time under the row (each line's row in a page of its
/// own: about 0.03 ms a cart of 20 lines, in PostgreSQL's CPU and in every server's wait).
///
/// A version names one state of a cart: every change takes the next one, in the one order of
/// the log. So a cart kept at the version the database has is the cart the database has,
/// whatever changed elsewhere meanwhile; the database always decides. The cache only saves
/// reads: an entry goes stale when another server changes its cart and is read again then,
/// unless the follower has applied that change already (`apply`, for every event it
/// delivers, the next version of a kept cart; any other version forgets it).
///
/// Bounded by lines (`maxLines`, a cart counting one more than its lines, so that empty ones
/// count too): a cart that would take it past them forgets carts, any of them, first; they are read from the database when a batch next needs them. A log that went
/// back (the database restored to an earlier point under a running server: `latest` lower
/// than a batch saw before) forgets everything, as a version may then name another state.
final class CartCache: Sendable {
    /// A cart as the log left it at its version, and where each line stands (the lines'
    /// order, which the batch writes).
    struct Entry: Sendable, Equatable {
        var cart: Cart
        var positions: LinePositions
    }

    fileprivate struct State {
        var entries: [String: Entry] = [:]
        var lines = 0
        var latestSeen: Int64 = 0
    }

    private let state = NIOLockedValueBox(State())
    /// The most lines kept over all carts (a full cart is 1 000): about 150 bytes each.
    let maxLines: Int

    init(maxLines: Int = 100_000) {
        self.maxLines = maxLines
    }

    /// The kept carts among `ids`, for a batch that holds the seq row at `latest`.
    func entries(_ ids: some Sequence<String>, latest: Int64) -> [String: Entry] {
        state.withLockedValue { state in
            if latest < state.latestSeen {
                state = State()
            }
            state.latestSeen = latest
            var found: [String: Entry] = [:]
            for id in ids {
                if let entry = state.entries[id] { found[id] = entry }
            }
            return found
        }
    }

    /// Keeps the carts a committed batch left (each at its version), unless a later version
    /// of one is kept already.
    func keep(_ entries: [String: Entry]) {
        state.withLockedValue { state in
            for (id, entry) in entries {
                if let kept = state.entries[id], kept.cart.version >= entry.cart.version { continue }
                state.put(entry, for: id, maxLines: maxLines)
            }
        }
    }

    /// A delivered event: its cart, when kept at the version before, moves to the event's;
    /// kept at an older one, it is forgotten (a change was missed); at this one or later,
    /// the event is in it already.
    func apply(_ event: CartEvent) {
        state.withLockedValue { state in
            guard var entry = state.entries[event.cartID], entry.cart.version < event.version else { return }
            guard entry.cart.version == event.version - 1 else {
                state.put(nil, for: event.cartID, maxLines: maxLines)
                return
            }
            entry.cart.apply(event)
            entry.positions.apply(event.change, at: event.seq)
            state.put(entry, for: event.cartID, maxLines: maxLines)
        }
    }

    /// The carts kept, and their lines (for tests).
    var count: (carts: Int, lines: Int) {
        state.withLockedValue { ($0.entries.count, $0.lines) }
    }
}

extension CartCache.State {
    /// Keeps `entry` for `id` (nil: forgets it), forgetting other carts first while the lines
    /// would pass `maxLines`. A cart larger than that alone is not kept.
    fileprivate mutating func put(_ entry: CartCache.Entry?, for id: String, maxLines: Int) {
        if let old = entries.removeValue(forKey: id) { lines -= old.weight }
        guard let entry, entry.weight <= maxLines else { return }
        while lines + entry.weight > maxLines, let victim = entries.first {
            entries.remove(at: entries.startIndex)
            lines -= victim.value.weight
        }
        entries[id] = entry
        lines += entry.weight
    }
}

extension CartCache.Entry {
    /// What it counts against `CartCache.maxLines`: its lines, and one for the cart.
    fileprivate var weight: Int { cart.items.count + 1 }
}

/// Where each line of a cart stands in its order: the seq of the event that added it. A line
/// whose quantity changes keeps its place; a line removed, or every line of a cleared cart,
/// has none. The one rule of a line's position, for a batch's carts and the kept ones alike.
struct LinePositions: Sendable, Equatable {
    private(set) var bySKU: [String: Int64] = [:]

    init(_ bySKU: [String: Int64] = [:]) {
        self.bySKU = bySKU
    }

    subscript(sku: String) -> Int64? { bySKU[sku] }

    /// Applies one change, made as the event `seq`; returns the skus whose lines it removed.
    @discardableResult
    mutating func apply(_ change: CartChange, at seq: Int64) -> [String] {
        switch change {
        case .itemAdded(let item, _):
            if bySKU[item.sku] == nil { bySKU[item.sku] = seq }
            return []
        case .quantityChanged:
            return []
        case .itemRemoved(let sku):
            bySKU[sku] = nil
            return [sku]
        case .cartCleared:
            defer { bySKU = [:] }
            return Array(bySKU.keys)
        }
    }
}

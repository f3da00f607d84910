/// Which carts an observer wants: every cart, or some by id.
public enum CartSelection: Sendable, Hashable {
    case all
    case carts(Set<String>)

    /// These carts only.
    public static func only(_ ids: some Sequence<String>) -> CartSelection { .carts(Set(ids)) }

    public func contains(_ cartID: String) -> Bool {
        switch self {
        case .all: true
        case .carts(let ids): ids.contains(cartID)
        }
    }

    /// Whether every cart of `other` is in this one.
    package func covers(_ other: CartSelection) -> Bool {
        switch (self, other) {
        case (.all, _): true
        case (.carts, .all): false
        case (.carts(let mine), .carts(let theirs)): theirs.isSubset(of: mine)
        }
    }

    package func union(_ other: CartSelection) -> CartSelection {
        switch (self, other) {
        case (.carts(let mine), .carts(let theirs)): .carts(mine.union(theirs))
        default: .all
        }
    }

    /// The ids to subscribe to or read: nil for all, sorted otherwise.
    package var subscription: [String]? {
        switch self {
        case .all: nil
        case .carts(let ids): ids.sorted()
        }
    }

    /// The carts of this selection among `carts`, ordered by id: what an observer is told.
    package func carts(in carts: [String: Cart]) -> [Cart] {
        switch self {
        case .all: carts.values.sorted { $0.id < $1.id }
        case .carts(let ids): ids.sorted().compactMap { carts[$0] }
        }
    }
}

import FanoutProtocol
import Foundation

/// What a request's credential lets it do: which carts it may read, whether it may change them,
/// and until when. Decided once per request or subscription (`AccessPolicy.grant(for:needs:)`),
/// then applied as a cart filter: nothing is checked per event.
struct Grant: Sendable, Equatable {
    /// The carts a credential may see.
    enum Carts: Sendable, Equatable {
        case all
        case only(Set<String>)
    }

    /// The token's `sub`; nil for the operator's `--token` (or an open server).
    let subject: String?
    let carts: Carts
    let mayRead: Bool
    let mayWrite: Bool
    /// The token's `exp`: an open stream ends then. Nil: never.
    let expiresAt: Date?
    /// The operator's `--token`, or a server that asks for no credential: everything, and
    /// `/stats` and `/metrics`.
    var isOperator: Bool { subject == nil }

    /// The operator's key, or a server that asks for none.
    static let `operator` = Grant(subject: nil, carts: .all, mayRead: true, mayWrite: true, expiresAt: nil)

    /// What a request is held to before its credential was looked at: nothing.
    static let nothing = Grant(subject: "", carts: .only([]), mayRead: false, mayWrite: false, expiresAt: nil)

    /// The carts a read or a subscription of `requested` (nil: "all mine") may see: nil for
    /// every cart. Throws `insufficient_scope` without `read`, `forbidden_cart` for a cart the
    /// token does not name.
    func readable(_ requested: Set<String>?) throws(FanoutError) -> Set<String>? {
        guard mayRead else { throw FanoutError(.insufficientScope, "this token may not read carts (its scope has no read)") }
        guard case .only(let allowed) = carts else { return requested }
        guard let requested else { return allowed }
        if let forbidden = requested.subtracting(allowed).min() {
            throw FanoutError(.forbiddenCart, "this token does not give access to cart \(forbidden)")
        }
        return requested
    }

    /// Throws unless the credential may change `cart`: `insufficient_scope` without `write`,
    /// `forbidden_cart` for a cart the token does not name.
    func checkWrite(_ cart: String) throws(FanoutError) {
        guard mayWrite else { throw FanoutError(.insufficientScope, "this token may not change carts (its scope has no write)") }
        if case .only(let allowed) = carts, !allowed.contains(cart) {
            throw FanoutError(.forbiddenCart, "this token does not give access to cart \(cart)")
        }
    }

    /// Whether this credential may see every cart of a subscription filter (nil: all carts).
    func covers(_ filter: Set<String>?) -> Bool {
        switch (carts, filter) {
        case (.all, _): true
        case (.only, nil): false
        case (.only(let allowed), .some(let filter)): filter.isSubset(of: allowed)
        }
    }
}

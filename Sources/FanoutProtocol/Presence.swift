import Foundation

/// A JSON value, as a presence's state holds it: `{"editing": true, "field": "quantity"}`.
///
/// Numbers are `Double`s, as JSON's are; the literals of each kind build one
/// (`["editing": true, "line": 3]`).
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let flag = try? container.decode(Bool.self) {
            self = .bool(flag)
        } else if let number = try? container.decode(Double.self) {
            self = .number(number)
        } else if let text = try? container.decode(String.self) {
            self = .string(text)
        } else if let array = try? container.decode([JSONValue].self) {
            self = .array(array)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let flag): try container.encode(flag)
        case .number(let number): try container.encode(number)
        case .string(let text): try container.encode(text)
        case .array(let array): try container.encode(array)
        case .object(let object): try container.encode(object)
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// What a member of a cart's presence shows the others besides being there: a JSON object of
/// at most `PresenceLimits.maxStateBytes` (`{"editing": true}`); empty by default.
public typealias PresenceState = [String: JSONValue]

/// The limits of presence that every server applies (the server's own, per cart, are in its
/// options: `--presence-max-members`).
public enum PresenceLimits {
    /// The most bytes a state may take, as compact JSON (sorted keys, no spaces).
    public static let maxStateBytes = 1_024
    /// The most characters of a member key (`A-Za-z0-9._-`).
    public static let maxMemberKeyLength = 64
    /// The most state changes a subscription may send in one second (more are refused,
    /// `presence_rate_limited`, and change nothing).
    public static let maxStateChangesPerSecond = 10
    /// The most state changes one cart takes in one second, all its members together (more are
    /// refused, `presence_rate_limited`): each goes to every follower of the cart.
    public static let maxCartStateChangesPerSecond = 100
    /// The most presence messages one cart's state changes may make in one second (a change
    /// makes one per follower): a cart of more than 100 followers takes fewer changes a second
    /// (10 at 1 000 followers), at least one.
    public static let maxCartStateDeliveriesPerSecond = 10_000
    /// The most state changes one user (a signed token's `sub`) may make in one second, all its
    /// subscriptions together (more are refused, `presence_rate_limited`).
    public static let maxUserStateChangesPerSecond = 20

    /// The state's size as the server counts it, or nil for a state that cannot be JSON (a
    /// number that is not finite).
    public static func size(of state: PresenceState) -> Int? {
        try? FanoutJSON.encoder().encode(state).count
    }

    /// Throws `invalid_presence` for a key that may not name a member (`isValidMemberKey`).
    public static func check(key: String) throws(FanoutError) {
        guard isValidMemberKey(key) else {
            throw FanoutError(
                .invalidPresence,
                "a presence key is 1–\(maxMemberKeyLength) characters of A-Za-z0-9._-, other than . and .. (got \(CartLimits.quoted(key)))")
        }
    }

    /// Throws `invalid_presence_state` for a state over `maxStateBytes` as compact JSON (or one
    /// that cannot be JSON).
    public static func check(_ state: PresenceState) throws(FanoutError) {
        guard let size = size(of: state), size <= maxStateBytes else {
            throw FanoutError(.invalidPresenceState, "a presence state is a JSON object of at most \(maxStateBytes) bytes as compact JSON")
        }
    }

    /// Whether `key` may name a member: an identifier as a cart id is
    /// (`CartLimits.isValidIdentifier`), of at most `maxMemberKeyLength` characters.
    public static func isValidMemberKey(_ key: String) -> Bool {
        CartLimits.isValidIdentifier(key, maxLength: maxMemberKeyLength)
    }
}

/// One member of a cart's presence: a subscription that asked to be present, with who it is
/// (its token's `sub`), its key, its state, and since when it is there.
public struct PresenceMember: Codable, Sendable, Hashable, Identifiable {
    /// A member's identity: its user and its key. Two subscriptions of one user with one key
    /// are one member (a reconnect takes over the membership it had).
    public struct ID: Sendable, Hashable, Codable {
        /// The signed token's `sub`; nil for a subscription without one.
        public var user: String?
        /// The key the subscription gave, or the one the server made for it.
        public var member: String

        public init(user: String?, member: String) {
            self.user = user
            self.member = member
        }
    }

    /// The signed token's `sub`; nil for a subscription without one.
    public var user: String?
    /// The key the subscription gave, or the one the server made for it.
    public var member: String
    /// What it shows the others.
    public var state: PresenceState
    /// When it joined (milliseconds since 1970 on the wire).
    public var since: Date

    public var id: ID { ID(user: user, member: member) }

    public init(user: String?, member: String, state: PresenceState = [:], since: Date) {
        self.user = user
        self.member = member
        self.state = state
        self.since = since
    }
}

/// Why a member left a cart's presence.
public enum PresenceLeaveReason: String, Codable, Sendable, Hashable, CaseIterable {
    /// Its connection closed: the client closed it (a released observer), or the network
    /// reset it.
    case closed
    /// Its lease lapsed: no sign of life for the lease's time (a client that vanished).
    case leaseExpired = "lease_expired"
    /// Its signed token expired.
    case tokenExpired = "token_expired"
    /// It fell too far behind and was ended.
    case tooSlow = "too_slow"
    /// Its server is shutting down.
    case shuttingDown = "shutting_down"
    /// Its server stopped answering the others (with several servers on one database).
    case nodeLost = "node_lost"

    /// A reason this version does not know reads as `closed`.
    public init(from decoder: any Decoder) throws {
        let raw = try decoder.singleValueContainer().decode(String.self)
        self = Self(rawValue: raw) ?? .closed
    }
}

/// What a subscription asks of presence: to be present on its carts (and to follow their
/// presence), under `key`, showing `state`.
public struct PresenceRequest: Codable, Sendable, Hashable {
    /// The member's key, 1–64 characters of `A-Za-z0-9._-` (not `.` or `..`), the same across reconnects (a
    /// reconnect with it takes the membership over: the others see no leave and join). Nil: the
    /// server makes one, and a reconnect is a new member.
    public var key: String?
    /// What it shows the others.
    public var state: PresenceState

    public init(key: String? = nil, state: PresenceState = [:]) {
        self.key = key
        self.state = state
    }

    enum CodingKeys: String, CodingKey { case key, state }

    /// A key that is not a string is `invalid_presence`, a state that is not an object
    /// `invalid_presence_state`: the subscription's mistakes, not unreadable messages.
    public init(from decoder: any Decoder) throws {
        guard let container = try? decoder.container(keyedBy: CodingKeys.self) else {
            throw FanoutError(.invalidPresence, "presence is an object: {\"key\":…,\"state\":{…}}, both optional")
        }
        do {
            key = try container.decodeIfPresent(String.self, forKey: .key)
        } catch {
            throw FanoutError(.invalidPresence, "a presence key is a string")
        }
        state = try Self.state(in: container, forKey: .state) ?? [:]
    }

    /// A state at `key`, if present; one that is not a JSON object (`null` included: it is not
    /// the absence of a state) is `invalid_presence_state`.
    static func state<Key: CodingKey>(in container: KeyedDecodingContainer<Key>, forKey key: Key) throws -> PresenceState? {
        guard container.contains(key) else { return nil }
        do {
            guard try !container.decodeNil(forKey: key) else { throw FanoutError(.invalidPresenceState, "") }
            return try container.decode(PresenceState.self, forKey: key)
        } catch {
            throw FanoutError(.invalidPresenceState, "a presence state is a JSON object (not null)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(key, forKey: .key)
        if !state.isEmpty { try container.encode(state, forKey: .state) }
    }
}

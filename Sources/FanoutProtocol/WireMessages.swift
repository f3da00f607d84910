import Foundation

/// The JSON coders every fanout program uses, so dates and keys read the same everywhere.
///
/// Dates are milliseconds since 1970 (exact, and easy to compare in any language).
public enum FanoutJSON {
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        return encoder
    }

    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }
}

/// A message a subscriber sends over the WebSocket (`/subscribe`), as a JSON text frame.
public enum ClientMessage: Sendable, Hashable {
    /// Start (or restart) the subscription: only `carts` (all when `nil`), resuming after
    /// `since` when given, else from a snapshot; with `presence`, present on those carts (named
    /// ones only) and following who else is.
    case subscribe(carts: [String]?, since: Int64?, presence: PresenceRequest? = nil)
    /// Changes the state this subscription shows on every cart it is present on (a
    /// subscription with `presence` only).
    case presence(state: PresenceState)
    /// Renews the lease. Any message of the protocol renews it; this one does nothing else.
    case heartbeat
    /// Hands the server a fresh signed token before the connection's expires: one for the same
    /// `sub`, whose carts cover the subscription's. Nothing answers it; a token refused is an
    /// `error` message, and the old one still ends the subscription at its `exp`.
    case refresh(token: String)

    public enum Kind: String, Codable, Sendable {
        case subscribe, heartbeat, refresh, presence
    }

    /// What a `since` may be, in words, for every message that refuses one.
    public static let sinceRule = "a whole number from 0 to \(Int64.max)"

    /// The message as the JSON text of its WebSocket frame.
    public func jsonText() throws -> String {
        String(decoding: try FanoutJSON.encoder().encode(self), as: UTF8.self)
    }
}

/// Why a snapshot was sent instead of (or before) events.
public enum SnapshotReason: String, Codable, Sendable, Hashable {
    /// The subscription gave no `since`.
    case initial
    /// The events after `since` were pruned from the log.
    case sinceTooOld = "since_too_old"
    /// `since` is newer than the log: the client followed another database.
    case sinceAhead = "since_ahead"
}

/// A message the server sends to a subscriber, as a JSON text frame.
public enum ServerMessage: Sendable, Hashable {
    case welcome(Welcome)
    /// The subscribed carts and the seq they reflect; events follow from `seq + 1`.
    ///
    /// A large snapshot comes in parts, so no message grows with the store: every part but the
    /// last has `more` set, all have the same `seq` and `reason`, and the carts of all parts
    /// together are the snapshot. Events follow the last part. `SnapshotAssembly` puts the parts
    /// back together.
    case snapshot(carts: [Cart], seq: Int64, reason: SnapshotReason, more: Bool = false)
    case event(CartEvent)
    /// Sent every heartbeat interval: a quiet subscriber at `latestSeq` missed nothing.
    case heartbeat(latestSeq: Int64)
    /// A `FanoutErrorCode`'s raw value (kept as text so that a newer server's code still
    /// decodes) and a message for people.
    case error(code: String, message: String)
    /// Who is on a cart now (a subscription with presence gets it first for each of its carts,
    /// and again whenever it may have missed a change). Replaces what the client held.
    case presence(cartID: String, members: [PresenceMember])
    /// A member joined the cart's presence.
    case presenceJoin(cartID: String, member: PresenceMember)
    /// A member changed its state.
    case presenceUpdate(cartID: String, member: PresenceMember)
    /// A member left the cart's presence, for `reason`.
    case presenceLeave(cartID: String, member: PresenceMember.ID, reason: PresenceLeaveReason)

    /// An error message for `error`.
    public static func error(_ error: FanoutError) -> ServerMessage {
        .error(code: error.code.rawValue, message: error.message)
    }

    public struct Welcome: Codable, Sendable, Hashable {
        public var subscriberID: String
        /// Seconds between the heartbeats the client should send.
        public var heartbeatInterval: Double
        /// Seconds without any client message after which the server drops the subscriber.
        public var leaseTTL: Double
        public var latestSeq: Int64
        /// The identity of the server's database, made when the database was created: a client
        /// that keeps carts across runs knows by it whether its copy is of this database (a
        /// reset database or another server's may have seqs in the same range, but not this
        /// identity; a restored backup keeps it). Nil from a server that does not say it.
        public var databaseID: String?

        public init(subscriberID: String, heartbeatInterval: Double, leaseTTL: Double, latestSeq: Int64, databaseID: String? = nil) {
            self.subscriberID = subscriberID
            self.heartbeatInterval = heartbeatInterval
            self.leaseTTL = leaseTTL
            self.latestSeq = latestSeq
            self.databaseID = databaseID
        }

        enum CodingKeys: String, CodingKey {
            case subscriberID = "subscriberId", heartbeatInterval, leaseTTL = "leaseTtl", latestSeq, databaseID = "databaseId"
        }

        /// How often a client heartbeats: the announced interval, but never more than 20 times a
        /// second, whatever a server says.
        public var clientHeartbeatInterval: Duration {
            .milliseconds(Int(max(0.05, heartbeatInterval) * 1_000))
        }
    }

    public enum Kind: String, Codable, Sendable {
        case welcome, snapshot, event, heartbeat, error, presence, presenceJoin, presenceUpdate, presenceLeave
    }

    public var kind: Kind {
        switch self {
        case .welcome: .welcome
        case .snapshot: .snapshot
        case .event: .event
        case .heartbeat: .heartbeat
        case .error: .error
        case .presence: .presence
        case .presenceJoin: .presenceJoin
        case .presenceUpdate: .presenceUpdate
        case .presenceLeave: .presenceLeave
        }
    }
}

/// The close codes the server uses, in the WebSocket application range (4000–4999).
public enum FanoutCloseCode: UInt16, Sendable, CaseIterable {
    /// No client message of the protocol within the lease TTL. Reconnect and resume with `since`.
    case leaseExpired = 4000
    /// The subscriber fell too far behind, or left the answers to its messages unread: it read
    /// too slowly. Reconnect and resume with `since`.
    case tooSlow = 4001
    /// The server has its maximum number of subscribers. Retry later.
    case serverFull = 4002
    /// The subscription's token expired. Reconnect with a fresh token and resume with `since`.
    case tokenExpired = 4003
}

private enum MessageKeys: String, CodingKey {
    case type, carts, since, seq, reason, more, latestSeq, code, message, token, presence, state, cartId, members, member, user
}

extension ClientMessage: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: MessageKeys.self)
        switch try container.decode(Kind.self, forKey: .type) {
        case .subscribe:
            self = .subscribe(
                carts: try container.decodeIfPresent([String].self, forKey: .carts),
                since: try Self.since(in: container),
                presence: try container.decodeIfPresent(PresenceRequest.self, forKey: .presence))
        case .heartbeat:
            self = .heartbeat
        case .refresh:
            self = .refresh(token: try container.decode(String.self, forKey: .token))
        case .presence:
            guard let state = try PresenceRequest.state(in: container, forKey: .state) else {
                throw FanoutError(.invalidPresenceState, "a presence message carries its state: {\"type\":\"presence\",\"state\":{…}}")
            }
            self = .presence(state: state)
        }
    }

    /// A subscription's `since`, when present: a JSON number with a whole value that fits an
    /// `Int64` (`12`, `12.0` and `1.2e1` are 12). Anything else is the subscription's mistake,
    /// not an unreadable message: `FanoutError` `invalid_since`, saying what it got. Whether it
    /// may be negative is the server's check, the same for every transport.
    private static func since(in container: KeyedDecodingContainer<MessageKeys>) throws -> Int64? {
        let got: String
        do {
            return try container.decodeIfPresent(Int64.self, forKey: .since)
        } catch DecodingError.typeMismatch {
            if let text = try? container.decode(String.self, forKey: .since) {
                got = "the string \(CartLimits.quoted(text))"
            } else if let flag = try? container.decode(Bool.self, forKey: .since) {
                got = "\(flag)"
            } else {
                got = "a value that is not a number"
            }
        } catch {
            // A number, but a fraction or out of range. A Decimal repeats 38 digits exactly.
            let number = (try? container.decode(Decimal.self, forKey: .since)).map { "\($0)" }
            got = number.flatMap { $0.count <= 38 ? $0 : nil } ?? "a number too long to show"
        }
        throw FanoutError(.invalidSince, "since must be \(sinceRule) (got \(got))")
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: MessageKeys.self)
        switch self {
        case .subscribe(let carts, let since, let presence):
            try container.encode(Kind.subscribe, forKey: .type)
            try container.encodeIfPresent(carts, forKey: .carts)
            try container.encodeIfPresent(since, forKey: .since)
            try container.encodeIfPresent(presence, forKey: .presence)
        case .heartbeat:
            try container.encode(Kind.heartbeat, forKey: .type)
        case .refresh(let token):
            try container.encode(Kind.refresh, forKey: .type)
            try container.encode(token, forKey: .token)
        case .presence(let state):
            try container.encode(Kind.presence, forKey: .type)
            try container.encode(state, forKey: .state)
        }
    }
}

extension ServerMessage: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: MessageKeys.self)
        switch try container.decode(Kind.self, forKey: .type) {
        case .welcome:
            self = .welcome(try Welcome(from: decoder))
        case .snapshot:
            self = .snapshot(
                carts: try container.decode([Cart].self, forKey: .carts),
                seq: try container.decode(Int64.self, forKey: .seq),
                reason: try container.decode(SnapshotReason.self, forKey: .reason),
                more: try container.decodeIfPresent(Bool.self, forKey: .more) ?? false)
        case .event:
            self = .event(try CartEvent(from: decoder))
        case .heartbeat:
            self = .heartbeat(latestSeq: try container.decode(Int64.self, forKey: .latestSeq))
        case .error:
            self = .error(
                code: try container.decode(String.self, forKey: .code),
                message: try container.decode(String.self, forKey: .message))
        case .presence:
            self = .presence(
                cartID: try container.decode(String.self, forKey: .cartId),
                members: try container.decode([PresenceMember].self, forKey: .members))
        case .presenceJoin:
            self = .presenceJoin(
                cartID: try container.decode(String.self, forKey: .cartId),
                member: try container.decode(PresenceMember.self, forKey: .member))
        case .presenceUpdate:
            self = .presenceUpdate(
                cartID: try container.decode(String.self, forKey: .cartId),
                member: try container.decode(PresenceMember.self, forKey: .member))
        case .presenceLeave:
            self = .presenceLeave(
                cartID: try container.decode(String.self, forKey: .cartId),
                member: PresenceMember.ID(
                    user: try container.decodeIfPresent(String.self, forKey: .user),
                    member: try container.decode(String.self, forKey: .member)),
                reason: try container.decode(PresenceLeaveReason.self, forKey: .reason))
        }
    }

    /// Flat objects with a `type` field: `{"type":"event","seq":7,...}`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: MessageKeys.self)
        try container.encode(kind, forKey: .type)
        switch self {
        case .welcome(let welcome):
            try welcome.encode(to: encoder)
        case .snapshot(let carts, let seq, let reason, let more):
            try container.encode(carts, forKey: .carts)
            try container.encode(seq, forKey: .seq)
            try container.encode(reason, forKey: .reason)
            // Absent means "the last part", so a snapshot in one part reads as it always did.
            if more { try container.encode(true, forKey: .more) }
        case .event(let event):
            try event.encode(to: encoder)
        case .heartbeat(let latestSeq):
            try container.encode(latestSeq, forKey: .latestSeq)
        case .error(let code, let message):
            try container.encode(code, forKey: .code)
            try container.encode(message, forKey: .message)
        case .presence(let cartID, let members):
            try container.encode(cartID, forKey: .cartId)
            try container.encode(members, forKey: .members)
        case .presenceJoin(let cartID, let member), .presenceUpdate(let cartID, let member):
            try container.encode(cartID, forKey: .cartId)
            try container.encode(member, forKey: .member)
        case .presenceLeave(let cartID, let member, let reason):
            try container.encode(cartID, forKey: .cartId)
            try container.encodeIfPresent(member.user, forKey: .user)
            try container.encode(member.member, forKey: .member)
            try container.encode(reason, forKey: .reason)
        }
    }
}

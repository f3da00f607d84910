/// Why a remote store or subscription is reconnecting: typed, so that an app can tell "offline" from
/// "the server is restarting" from "the token expired", with a description for people.
public enum ConnectionProblem: Error, Sendable, Hashable, CustomStringConvertible {
    /// No connection could be made, or it broke without a word from the server: offline, the
    /// server down or restarting, a network that dropped it, or a server gone silent.
    case unreachable(String)
    /// The server ended the subscription and said why: its WebSocket close code (1001 shutting
    /// down, 4000 lease expired, 4001 too slow, 4002 server full, 4003 token expired) and,
    /// when it sent one, the error code (an event stream's `server-error`). Both nil: it closed
    /// without a reason.
    case endedByServer(closeCode: Int?, code: FanoutErrorCode?)
    /// The server answered with one of its errors that retrying may clear (503
    /// `store_unavailable`, `overloaded`, `shutting_down`, 507 `storage_full`, …).
    case serverError(FanoutErrorCode?, message: String)
    /// The server sent what the protocol does not allow; the store reconnects and resumes.
    case protocolViolation(String)
    /// The app's credentials provider (`Credentials.provider`) threw: the app's own token
    /// backend is the trouble, not the network or the server. Asked again after the pause.
    case credentialsUnavailable(String)

    /// The server's name does not resolve (a typo, or no network to ask).
    public var isUnresolvable: Bool {
        if case .unreachable(let why) = self { why.hasPrefix(Self.cannotResolvePrefix) } else { false }
    }

    private static let cannotResolvePrefix = "cannot resolve "

    /// What `unreachable` says of a host name that does not resolve.
    package static func cannotResolve(_ host: String) -> String { cannotResolvePrefix + host }

    /// Nothing reached the server, or nothing came back: the device may be offline.
    public var isUnreachable: Bool {
        if case .unreachable = self { true } else { false }
    }

    /// The server ended the subscription because the token expired: a provider is asked for a
    /// fresh one before the next connection.
    public var isTokenExpired: Bool {
        switch self {
        case .endedByServer(let closeCode, let code): (code ?? closeCode.flatMap(FanoutErrorCode.init(closeCode:))) == .tokenExpired
        default: false
        }
    }

    /// The server is going away (shutting down, restarting): it will likely be back soon.
    public var isServerGoingAway: Bool {
        switch self {
        case .endedByServer(let closeCode, let code): (code ?? closeCode.flatMap(FanoutErrorCode.init(closeCode:))) == .shuttingDown
        case .serverError(let code, _): code == .shuttingDown
        default: false
        }
    }

    public var description: String {
        switch self {
        case .unreachable(let why): "unreachable: \(why)"
        case .endedByServer(let closeCode, let code):
            switch (closeCode, code ?? closeCode.flatMap(FanoutErrorCode.init(closeCode:))) {
            case (nil, nil): "the server ended the subscription"
            case (let closeCode?, nil): "the server ended the subscription (\(closeCode))"
            case (nil, let code?): "the server ended the subscription (\(code.rawValue))"
            case (let closeCode?, let code?): "the server ended the subscription (\(closeCode) \(code.rawValue))"
            }
        case .serverError(let code, let message): "server error (\(code?.rawValue ?? "unknown")): \(message)"
        case .protocolViolation(let why): "the server broke the protocol: \(why)"
        case .credentialsUnavailable(let why): "no token: the credentials provider failed (\(why))"
        }
    }
}

import CartStore
import Foundation
import NIOCore

/// A server message ready for framing: its JSON, and what a transport may say beside it.
struct WireMessage: Sendable {
    /// The message's `type` (`event`, `snapshot`, `heartbeat`, `welcome`, `error`).
    let type: ServerMessage.Kind
    let json: ByteBuffer
    /// The seq a client that has this message resumes after: an event's, and a snapshot's on
    /// its last part only (resuming after an earlier part would skip the carts of the rest).
    /// For a heartbeat, the latest seq it announces.
    let seq: Int64?
}

/// How each transport wraps a server message. A new transport adds a case here and its
/// framing: events are then framed for it once per commit, like for the others.
enum WireFraming: Int, CaseIterable, Sendable {
    case webSocket
    case serverSentEvents

    func frame(_ message: WireMessage) -> ByteBuffer {
        switch self {
        case .webSocket: WebSocketFrames.text(message.json)
        case .serverSentEvents: ServerSentEvents.frame(message)
        }
    }

    /// `message` framed for every transport, by `rawValue`.
    static func frameForAll(_ message: WireMessage) -> [ByteBuffer] {
        allCases.map { $0.frame(message) }
    }
}

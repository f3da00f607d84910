import CartStore
import Foundation
import NIOCore

/// Where an event becomes bytes for the wire: its message is made once per commit around the
/// change JSON the store wrote to the log (`EventJSON`), then framed once for each transport,
/// and those same buffers go to every subscriber (`ByteBuffer` is copy-on-write, so sharing one
/// copies nothing).
struct EventBytes: Sendable {
    let seq: Int64
    let cartID: String
    /// The event framed for each transport, by `WireFraming.rawValue`.
    private let framed: [ByteBuffer]

    init(_ event: CartEvent) {
        seq = event.seq
        cartID = event.cartID
        framed = WireFraming.frameForAll(ServerEncoding.event(event))
    }

    func framed(for framing: WireFraming) -> ByteBuffer { framed[framing.rawValue] }
}

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

/// Encodes server messages as JSON with the product's encoder.
enum ServerEncoding {
    private static let encoder = FanoutJSON.encoder()

    /// An event message, around the change JSON it carries from the log (no encoder involved).
    static func event(_ event: CartEvent) -> WireMessage {
        let json = ByteBuffer(bytes: EventJSON.message(event))
        return WireMessage(type: .event, json: json, seq: event.seq)
    }

    static func message(_ message: ServerMessage) -> WireMessage {
        let seq: Int64? =
            switch message {
            case .event(let event): event.seq
            case .snapshot(_, let seq, _, let more): more ? nil : seq
            case .heartbeat(let latestSeq): latestSeq
            case .welcome, .error, .presence, .presenceJoin, .presenceUpdate, .presenceLeave: nil
            }
        return WireMessage(type: message.kind, json: encode(message), seq: seq)
    }

    static func encode(_ message: ServerMessage) -> ByteBuffer {
        guard let data = try? encoder.encode(message) else {
            // Only non-finite numbers could fail, and the server sends none; never crash for it.
            return ByteBuffer(
                string: #"{"code":"\#(FanoutErrorCode.internalError.rawValue)","message":"unencodable message","type":"error"}"#)
        }
        return ByteBuffer(bytes: data)
    }
}

/// A snapshot as messages of bounded size: parts of at most `maxCarts` carts and, unless one
/// cart alone is larger, `maxBytes` of JSON, so that no client needs an unbounded message. Every
/// part carries the snapshot's seq and reason; all but the last say `"more":true`.
enum SnapshotParts {
    static let maxCarts = 500
    static let maxBytes = 256 * 1024

    static func encode(_ snapshot: CartSnapshot, reason: SnapshotReason) -> [WireMessage] {
        var parts: [WireMessage] = []
        var part = JSONBytes(capacity: 4_096)
        var cartsInPart = 0
        func startPart() {
            part = JSONBytes(capacity: 4_096)
            part.raw(#"{"carts":["#)
            cartsInPart = 0
        }
        func finishPart(more: Bool) {
            part.raw(#"],"#)
            if more { part.raw(#""more":true,"#) }
            part.raw(#""reason":"#)
            part.string(reason.rawValue)
            part.raw(#","seq":"#)
            part.int(snapshot.seq)
            part.raw(#","type":"snapshot"}"#)
            parts.append(WireMessage(type: .snapshot, json: ByteBuffer(bytes: part.bytes), seq: more ? nil : snapshot.seq))
        }
        startPart()
        for cart in snapshot.carts {
            var json = JSONBytes(capacity: 96 + cart.items.count * 96)
            json.cart(cart)
            if cartsInPart > 0, cartsInPart == maxCarts || part.bytes.count + json.bytes.count > maxBytes {
                finishPart(more: true)
                startPart()
            }
            if cartsInPart > 0 { part.raw(",") }
            part.raw(json.bytes)
            cartsInPart += 1
        }
        finishPart(more: false)
        return parts
    }
}

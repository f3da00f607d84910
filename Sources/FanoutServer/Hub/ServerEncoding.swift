import CartStore
import Foundation
import NIOCore

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

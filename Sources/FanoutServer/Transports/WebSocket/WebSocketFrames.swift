import NIOCore
import NIOWebSocket

/// Server-to-client WebSocket frames as bytes (RFC 6455 §5.2): final, unmasked. Everything the
/// server sends a subscriber is framed here and written below NIO's frame encoder, so the shared
/// event bytes of `EventBytes` need no header allocation per subscriber, and all writes take one
/// path in one order.
enum WebSocketFrames {
    static func text(_ payload: ByteBuffer) -> ByteBuffer {
        frame(opcode: 0x1, payload)
    }

    static func pong(_ payload: ByteBuffer) -> ByteBuffer {
        frame(opcode: 0xA, payload)
    }

    /// A close frame with `code` and an optional reason (at most 123 bytes, as the RFC allows).
    static func close(code: WebSocketErrorCode, reason: String?) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.write(webSocketErrorCode: code)
        if let reason { payload.writeString(String(decoding: reason.utf8.prefix(123), as: UTF8.self)) }
        return frame(opcode: 0x8, payload)
    }

    private static func frame(opcode: UInt8, _ payload: ByteBuffer) -> ByteBuffer {
        let length = payload.readableBytes
        var frame = ByteBufferAllocator().buffer(capacity: length + 10)
        frame.writeInteger(0x80 | opcode)
        if length < 126 {
            frame.writeInteger(UInt8(length))
        } else if length <= Int(UInt16.max) {
            frame.writeInteger(UInt8(126))
            frame.writeInteger(UInt16(length))
        } else {
            frame.writeInteger(UInt8(127))
            frame.writeInteger(UInt64(length))
        }
        frame.writeImmutableBuffer(payload)
        return frame
    }
}

import NIOCore
import NIOWebSocket

/// Writes complete WebSocket frames straight into a connection's pipeline, below its frame
/// encoder: every subscriber gets the same bytes, encoded once per event, with no per-write
/// header allocation or handler hops. Used on the connection's event loop only.
struct WireWriter: Sendable {
    let context: NIOLoopBound<ChannelHandlerContext>
    /// Held directly: asking the context for it costs a pipeline lookup and retains per write.
    let channel: any Channel

    /// Finds the frame encoder of a WebSocket channel.
    ///
    /// - Parameter onWritable: called on the event loop whenever the channel's unsent bytes
    ///   fall below the low-water mark again.
    static func make(for channel: any Channel, onWritable: @escaping @Sendable () -> Void) -> EventLoopFuture<WireWriter> {
        channel.eventLoop.submit {
            let operations = channel.pipeline.syncOperations
            let context = try operations.context(handlerType: WebSocketFrameEncoder.self)
            try operations.addHandler(WritabilityRelay(onWritable: onWritable), position: .first)
            return WireWriter(context: NIOLoopBound(context, eventLoop: channel.eventLoop), channel: channel)
        }
    }

    var isWritable: Bool { channel.isWritable }

    func write(_ frameBytes: ByteBuffer) {
        context.value.write(NIOAny(frameBytes), promise: nil)
    }

    func flush() {
        context.value.flush()
    }

    /// An unmasked, final text frame (RFC 6455 §5.2): what a server sends.
    static func textFrame(_ payload: ByteBuffer) -> ByteBuffer {
        let length = payload.readableBytes
        var frame = ByteBufferAllocator().buffer(capacity: length + 10)
        frame.writeInteger(UInt8(0x81))
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

/// Tells its owner when a channel can take more bytes, and passes the event on.
private final class WritabilityRelay: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    let onWritable: @Sendable () -> Void

    init(onWritable: @escaping @Sendable () -> Void) {
        self.onWritable = onWritable
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { onWritable() }
        context.fireChannelWritabilityChanged()
    }
}

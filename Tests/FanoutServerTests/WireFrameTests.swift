import CartStore
import FanoutTestSupport
import Foundation
import GRDB
import Logging
import NIOCore
import NIOEmbedded
import NIOPosix
import Testing

@testable import FanoutServer

@Suite("Wire frames")
struct WireFrameTests {
    /// Decodes a server frame's header as a client would (RFC 6455 §5.2).
    static func decode(_ frame: ByteBuffer) -> (opcodeByte: UInt8, masked: Bool, payload: ByteBuffer)? {
        var frame = frame
        guard let first = frame.readInteger(as: UInt8.self), let second = frame.readInteger(as: UInt8.self) else { return nil }
        var length = Int(second & 0x7F)
        if length == 126 {
            guard let extended = frame.readInteger(as: UInt16.self) else { return nil }
            length = Int(extended)
        } else if length == 127 {
            guard let extended = frame.readInteger(as: UInt64.self) else { return nil }
            length = Int(extended)
        }
        guard let payload = frame.readSlice(length: length), frame.readableBytes == 0 else { return nil }
        return (first, second & 0x80 != 0, payload)
    }

    @Test(arguments: [0, 125, 126, 300, 65_535, 65_536, 200_000])
    func textFramesCarryTheirPayloadWithTheRightLengthEncoding(length: Int) throws {
        let payload = ByteBuffer(repeating: UInt8(ascii: "x"), count: length)
        let decoded = try #require(Self.decode(WebSocketFrames.text(payload)))
        #expect(decoded.opcodeByte == 0x81, "FIN + text")
        #expect(!decoded.masked, "servers do not mask")
        #expect(decoded.payload == payload)
    }
}

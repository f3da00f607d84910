import NIOCore
import Testing

@testable import FanoutClient

/// The client's reading of a `text/event-stream` body, however the bytes are cut.
struct EventStreamParserTests {
    static let stream =
        "retry: 1000\n\nevent: welcome\ndata: {\"type\":\"welcome\"}\n\n: heartbeat 3\n\nid: 4\r\nevent: event\r\ndata: {\"seq\":4}\r\n\r\ndata:a\ndata: b\n\n"

    @Test(arguments: [1, 2, 7, 1_000])
    func eventsComeWholeWhateverTheChunks(chunk: Int) throws {
        var parser = EventStreamParser(maxLine: 1_024)
        var events: [EventStreamParser.Event] = []
        let bytes = Array(Self.stream.utf8)
        for start in stride(from: 0, to: bytes.count, by: chunk) {
            events += try parser.feed(ByteBuffer(bytes: bytes[start..<min(start + chunk, bytes.count)]))
        }
        #expect(
            events == [
                .init(id: nil, name: "welcome", data: #"{"type":"welcome"}"#),
                .init(id: "4", name: "event", data: #"{"seq":4}"#),
                .init(id: nil, name: "message", data: "a\nb"),
            ])
    }

    @Test func anEndlessLineIsRefused() {
        var parser = EventStreamParser(maxLine: 16)
        #expect(throws: ProtocolViolation.self) { try parser.feed(ByteBuffer(string: String(repeating: "x", count: 17))) }
    }
}

import Logging
import Testing

@testable import FanoutServer

/// The text log's `key=value`: a value reads back whole (quoted when it has a space, a quote or
/// an `=`), and a line stays one line whatever a value holds (an error's message with line
/// breaks, a client's text).
@Suite("The text log")
struct ServerLogHandlerTests {
    @Test func valuesReadBackWholeAndALineStaysOneLine() {
        let handler = ServerLogHandler(label: "fanout")
        let event = LogEvent(
            level: .info, message: "request refused", metadata: nil, source: "FanoutServer", file: "", function: "", line: 0)
        let line = handler.line(
            event,
            metadata: [
                "fanout.port": "8080", "fanout.access": "operator token", "fanout.reason": "said \"no\"\nthen a=b",
                "fanout.empty": "",
            ])
        #expect(line.hasSuffix("[FanoutServer] request refused\n"))
        #expect(line.filter { $0 == "\n" }.count == 1, "one line: \(line)")
        #expect(line.contains(" fanout.port=8080 "))
        #expect(line.contains(#" fanout.access="operator token" "#))
        #expect(line.contains(#" fanout.reason="said \"no\"\nthen a=b" "#.replacingOccurrences(of: "\n", with: "\\n")))
        #expect(line.contains(#" fanout.empty="" "#))
    }
}

import ArgumentParser
import Foundation
import Logging

/// The server's log lines on standard error, in swift-log's `StreamLogHandler` format
/// (`<time> <level> <label>: <key=value …> [<source>] <message>`).
///
/// Unlike `StreamLogHandler`, it formats metadata only when a line is written.
/// `StreamLogHandler` formats it whenever it changes, and the HTTP server sets a request id on
/// every request's logger: that was a tenth of the CPU of a request, for lines that, at the
/// default level, are never written.
struct ServerLogHandler: LogHandler {
    /// How a line is written (`--log-format`).
    enum Format: String, CaseIterable, ExpressibleByArgument, Sendable {
        /// `<time> <level> <label>: <key=value …> [<source>] <message>`.
        case text
        /// One JSON object a line, keys sorted: `time`, `level`, `logger`, `source`, `message`, the
        /// error's `error.message` and `error.type` when there is one, then the metadata's keys
        /// (`fanout.port`, …) with their values as strings (lists and dictionaries as JSON).
        case json
    }

    let label: String
    let format: Format
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, format: Format = .text, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.format = format
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() {
            all.merge(provided) { _, provided in provided }
        }
        if let explicit = event.metadata {
            all.merge(explicit) { _, explicit in explicit }
        }
        if let error = event.error {
            all["error.message"] = "\(error)"
            all["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        // One write(2) per line: lines from several threads do not interleave.
        FileHandle.standardError.write(Data(line(event, metadata: all).utf8))
    }

    /// The line `event` makes, with `metadata` (all of it: the handler's, provided, explicit).
    func line(_ event: LogEvent, metadata all: Logger.Metadata) -> String {
        switch format {
        case .text:
            let pretty = all.isEmpty ? "" : " " + all.sorted { $0.key < $1.key }.map { "\($0)=\(Self.text($1))" }.joined(separator: " ")
            return "\(Self.timestamp()) \(event.level) \(label):\(pretty) [\(event.source)] \(event.message)\n"
        case .json:
            var object: [String: Any] = all.mapValues(Self.json)
            object["time"] = Self.timestamp()
            object["level"] = event.level.rawValue
            object["logger"] = label
            object["source"] = event.source
            object["message"] = "\(event.message)"
            let data =
                (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
            return String(decoding: data, as: UTF8.self) + "\n"
        }
    }

    /// A metadata value as text: as it is when it is one word, else in double quotes with `"`
    /// and `\` escaped and line breaks written `\n`, so that each `key=value` reads back whole
    /// and a line stays one line.
    static func text(_ value: Logger.Metadata.Value) -> String {
        let text = "\(value)"
        let plain =
            !text.isEmpty && text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0 != "\\" && $0.value != 0x7F }
        guard !plain else { return text }
        var quoted = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\n": quoted += "\\n"
            case "\r": quoted += "\\r"
            case "\t": quoted += "\\t"
            default: quoted.unicodeScalars.append(scalar.value < 0x20 || scalar.value == 0x7F ? "?" : scalar)
            }
        }
        return quoted + "\""
    }

    /// A metadata value as JSON: text as a string, lists and dictionaries as themselves.
    private static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(json)
        case .dictionary(let values): values.mapValues(json)
        }
    }

    private static func timestamp() -> String {
        var now = time(nil)
        var local = tm()
        guard localtime_r(&now, &local) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

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
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
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
        let pretty = all.isEmpty ? "" : " " + all.sorted { $0.key < $1.key }.map { "\($0)=\($1)" }.joined(separator: " ")
        let line = "\(Self.timestamp()) \(event.level) \(label):\(pretty) [\(event.source)] \(event.message)\n"
        // One write(2) per line: lines from several threads do not interleave.
        FileHandle.standardError.write(Data(line.utf8))
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

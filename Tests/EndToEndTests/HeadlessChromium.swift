import FanoutTestSupport
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers

/// A headless Chromium as a process, driven over the DevTools protocol (CDP) on one WebSocket:
/// what the page tests open pages in, wait on and photograph.
///
/// Debian's `chromium` package (`apt-get install chromium`; `.ci/run` installs it). It runs with
/// `--no-sandbox`, as the tests run as root, where Chromium's sandbox refuses to start.
final class HeadlessChromium {
    /// The browser on the `PATH`, if installed.
    static let executable: URL? = (ProcessInfo.processInfo.environment["PATH"] ?? "")
        .split(separator: ":")
        .flatMap { folder in ["chromium", "chromium-browser"].map { URL(fileURLWithPath: String(folder)).appending(path: $0) } }
        .first { FileManager.default.isExecutableFile(atPath: $0.path) }

    let process: ChildProcess
    /// Its profile, removed with it.
    let directory: URL

    /// - Parameter arguments: more of Chromium's flags (`--ignore-certificate-errors-spki-list`
    ///   to trust one server's certificate).
    init(executable: URL, windowSize: (width: Int, height: Int) = (1440, 900), arguments: [String] = []) async throws {
        directory = FileManager.default.temporaryDirectory.appending(path: "fanout-chromium-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        process = try await ChildProcess(
            executable,
            [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--hide-scrollbars", "--window-size=\(windowSize.width),\(windowSize.height)",
                // Port 0: Chromium picks one and writes it to DevToolsActivePort in the profile.
                "--remote-debugging-port=0", "--user-data-dir=\(directory.path)",
                // DevTools refuses WebSockets that name an origin, unless allowed; HummingbirdWSClient
                // names `ws://<host>` (without the port). No web page has that origin.
                "--remote-allow-origins=ws://127.0.0.1",
            ] + arguments + ["about:blank"])
    }

    /// The browser's DevTools WebSocket URL, once it listens (polled, up to `timeout`).
    func devToolsURL(timeout: Duration = .seconds(30)) async throws -> String {
        let file = directory.appending(path: "DevToolsActivePort")
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, process.isRunning {
            // Two lines, written once the port is open: the port, and the browser target's path.
            if let text = try? String(contentsOf: file, encoding: .utf8) {
                let lines = text.split(separator: "\n")
                if lines.count >= 2, let port = Int(lines[0]) { return "ws://127.0.0.1:\(port)\(lines[1])" }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw DevToolsError(
            message:
                "chromium did not open its DevTools port (running: \(process.isRunning)); its log:\n\(process.standardError.suffix(2_000))")
    }

    /// Ends the browser (SIGTERM, then SIGKILL after 5 s), waiting without holding a thread.
    func stop() async {
        process.signal(SIGTERM)
        if await process.exitStatus(within: .seconds(5)) == nil { await process.kill() }
    }

    /// For a test that failed before `stop()`: the process ends it with SIGKILL.
    deinit { try? FileManager.default.removeItem(at: directory) }
}

struct DevToolsError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// One DevTools connection to the browser: commands sent with an `id`, each answered by the
/// message with the same `id`; events (messages without one) are not used and dropped.
final class DevTools: Sendable {
    /// What the connection's task and the callers share.
    private final class Shared: Sendable {
        let writer = NIOLockedValueBox<WebSocketOutboundWriter?>(nil)
        /// The callers waiting for an answer, by command id; `nil` once the connection ended.
        let waiting = NIOLockedValueBox<[Int: CheckedContinuation<Data, any Error>]?>([:])
        let nextID = NIOLockedValueBox(0)
        /// Why the connection ended, once it did.
        let ended = NIOLockedValueBox<String?>(nil)

        func fail(all error: any Error) {
            ended.withLockedValue { $0 = $0 ?? "\(error)" }
            let pending = waiting.withLockedValue { waiting -> [Int: CheckedContinuation<Data, any Error>] in
                defer { waiting = nil }
                return waiting ?? [:]
            }
            for continuation in pending.values { continuation.resume(throwing: error) }
        }
    }

    private let shared = Shared()
    private let connection: Task<Void, Never>

    init(url: String) {
        let shared = shared
        connection = Task {
            do {
                // A screenshot's answer is one message of a few megabytes.
                var configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 26)
                configuration.closeTimeout = .seconds(1)
                var logger = Logger(label: "devtools")
                logger.logLevel = .critical
                try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, outbound, _ in
                    shared.writer.withLockedValue { $0 = outbound }
                    for try await message in inbound.messages(maxSize: 1 << 26) {
                        guard case .text(let text) = message else { continue }
                        let data = Data(text.utf8)
                        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
                            let id = (object["id"] as? NSNumber)?.intValue
                        else { continue }
                        let continuation = shared.waiting.withLockedValue { $0?.removeValue(forKey: id) }
                        continuation?.resume(returning: data)
                    }
                }
                shared.fail(all: DevToolsError(message: "the DevTools connection closed"))
            } catch {
                shared.fail(all: error)
            }
        }
    }

    /// Sends a command (to the browser, or to a page's `session`) and returns its `result`;
    /// throws the command's `error`, or after `timeout`.
    func send(_ method: String, _ parameters: [String: Any] = [:], session: String? = nil, timeout: Duration = .seconds(30)) async throws
        -> [String: Any]
    {
        let deadline = ContinuousClock.now + .seconds(10)
        var writer = shared.writer.withLockedValue { $0 }
        while writer == nil, ContinuousClock.now < deadline, shared.waiting.withLockedValue({ $0 != nil }) {
            try await Task.sleep(for: .milliseconds(10))
            writer = shared.writer.withLockedValue { $0 }
        }
        guard let writer else {
            throw DevToolsError(message: "no DevTools connection for \(method): \(shared.ended.withLockedValue { $0 } ?? "not open")")
        }
        let id = shared.nextID.withLockedValue {
            $0 += 1
            return $0
        }
        var command: [String: Any] = ["id": id, "method": method, "params": parameters]
        if let session { command["sessionId"] = session }
        let text = String(decoding: try JSONSerialization.data(withJSONObject: command), as: UTF8.self)
        let timer = Task { [shared] in
            try await Task.sleep(for: timeout)
            let continuation = shared.waiting.withLockedValue { $0?.removeValue(forKey: id) }
            continuation?.resume(throwing: DevToolsError(message: "\(method): no answer within \(timeout)"))
        }
        defer { timer.cancel() }
        let answer = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Data, any Error>) in
            let registered = shared.waiting.withLockedValue { waiting -> Bool in
                guard waiting != nil else { return false }
                waiting?[id] = continuation
                return true
            }
            guard registered else {
                continuation.resume(throwing: DevToolsError(message: "the DevTools connection closed before \(method)"))
                return
            }
            Task {
                do { try await writer.write(.text(text)) } catch {
                    shared.waiting.withLockedValue { $0?.removeValue(forKey: id) }?.resume(throwing: error)
                }
            }
        }
        let object = (try JSONSerialization.jsonObject(with: answer)) as? [String: Any] ?? [:]
        if let error = object["error"] as? [String: Any] {
            throw DevToolsError(message: "\(method): \(error["message"] ?? error)")
        }
        return object["result"] as? [String: Any] ?? [:]
    }

    /// Opens `url` in a new tab and attaches to it.
    func open(_ url: String) async throws -> BrowserPage {
        let target = try await send("Target.createTarget", ["url": url])
        guard let targetID = target["targetId"] as? String else { throw DevToolsError(message: "no targetId in \(target)") }
        let attached = try await send("Target.attachToTarget", ["targetId": targetID, "flatten": true])
        guard let session = attached["sessionId"] as? String else { throw DevToolsError(message: "no sessionId in \(attached)") }
        let page = BrowserPage(devTools: self, session: session, targetID: targetID)
        // The tab exists before it has loaded anything: wait until it has loaded `url`.
        let deadline = ContinuousClock.now + .seconds(30)
        while try await page.evaluate("location.href === \(Self.quoted(url)) && document.readyState === 'complete'", as: Bool.self) == false
        {
            guard ContinuousClock.now < deadline else { throw DevToolsError(message: "\(url) did not load") }
            try await Task.sleep(for: .milliseconds(20))
        }
        return page
    }

    /// A JavaScript string literal of `text`.
    static func quoted(_ text: String) -> String {
        String(decoding: try! JSONSerialization.data(withJSONObject: [text]), as: UTF8.self).dropFirst().dropLast().description
    }

    func close() async {
        _ = try? await send("Browser.close", timeout: .seconds(5))
        connection.cancel()
    }
}

/// One tab, through its DevTools session.
struct BrowserPage: Sendable {
    let devTools: DevTools
    let session: String
    let targetID: String

    /// Closes the tab, as a person closing it does: its connections close with it.
    func close() async throws {
        _ = try await devTools.send("Target.closeTarget", ["targetId": targetID])
    }

    /// Evaluates a JavaScript expression in the page and decodes its value, passed as JSON.
    func evaluate<Value: Decodable>(_ expression: String, as type: Value.Type = Value.self) async throws -> Value {
        let result = try await devTools.send(
            "Runtime.evaluate",
            [
                "expression": "JSON.stringify(\(expression))", "returnByValue": true, "awaitPromise": true,
            ], session: session)
        if let exception = result["exceptionDetails"] as? [String: Any] {
            let description = (exception["exception"] as? [String: Any])?["description"] ?? exception["text"] ?? exception
            throw DevToolsError(message: "the page threw: \(description)")
        }
        guard let json = (result["result"] as? [String: Any])?["value"] as? String else {
            throw DevToolsError(message: "no JSON value for \(expression.prefix(80)): \(result)")
        }
        return try JSONDecoder().decode(Value.self, from: Data(json.utf8))
    }

    /// Runs a statement in the page, for its effect.
    func run(_ statement: String) async throws {
        _ = try await evaluate("(() => { \(statement); return null })()", as: String?.self)
    }

    /// `prefers-color-scheme` as the page sees it: "light" or "dark".
    func emulateColorScheme(_ scheme: String) async throws {
        _ = try await devTools.send(
            "Emulation.setEmulatedMedia",
            [
                "features": [["name": "prefers-color-scheme", "value": scheme]]
            ], session: session)
    }

    /// The page as it is drawn, as PNG.
    func screenshot() async throws -> Data {
        let result = try await devTools.send("Page.captureScreenshot", ["format": "png"], session: session)
        guard let base64 = result["data"] as? String, let png = Data(base64Encoded: base64) else {
            throw DevToolsError(message: "no screenshot data")
        }
        return png
    }
}

import FanoutTestSupport
import Foundation
import Testing

/// nginx ending TLS in front of a `fanout-server`, configured with the recipe operators are
/// given (`deploy/nginx-fanout.conf`), only its name, port, certificate and upstream put in:
/// what the reverse-proxy tests go through.
///
/// Debian's `nginx-light` (`.ci/run` installs it). It runs in the foreground as one process
/// (`master_process off`), as root, with every path in a folder of its own.
final class NginxProxy {
    /// nginx, where Debian puts it.
    static let executable = URL(fileURLWithPath: "/usr/sbin/nginx")
    /// The recipe, as OPERATING.md gives it.
    static let recipe = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: "deploy/nginx-fanout.conf")

    let process: ChildProcess
    let port: Int
    let folder: URL

    /// Starts nginx on a free port, in front of the server on `upstream`, with `certificate`;
    /// returns once it accepts connections.
    init(upstream: Int, certificate: TestCertificate) async throws {
        folder = FileManager.default.temporaryDirectory.appending(path: "fanout-nginx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        port = try freeLoopbackPort()
        var site = try String(contentsOf: Self.recipe, encoding: .utf8)
        // The recipe's placeholders, each replaced: a recipe that changed them fails here
        // rather than testing something else.
        for (placeholder, value) in [
            ("listen 443 ssl;", "listen 127.0.0.1:\(port) ssl;"),
            ("server_name carts.example.com;", "server_name 127.0.0.1;"),
            ("/etc/ssl/fanout/fullchain.pem", certificate.certificate.path),
            ("/etc/ssl/fanout/privkey.pem", certificate.key.path),
            ("proxy_pass http://127.0.0.1:8080;", "proxy_pass http://127.0.0.1:\(upstream);"),
        ] {
            guard site.contains(placeholder) else { throw DevToolsError(message: "the recipe no longer has \(placeholder)") }
            site = site.replacingOccurrences(of: placeholder, with: value)
        }
        let path = folder.path
        let configuration = """
            daemon off;
            master_process off;
            pid \(path)/nginx.pid;
            error_log \(path)/error.log info;
            events { worker_connections 256; }
            http {
                access_log off;
                client_body_temp_path \(path)/body;
                proxy_temp_path \(path)/proxy;
                fastcgi_temp_path \(path)/fastcgi;
                uwsgi_temp_path \(path)/uwsgi;
                scgi_temp_path \(path)/scgi;
            \(site)
            }
            """
        let file = folder.appending(path: "nginx.conf")
        try configuration.write(to: file, atomically: true, encoding: .utf8)
        process = try await ChildProcess(Self.executable, ["-c", file.path, "-p", path])
        let port = port
        let listening = await eventually(timeout: .seconds(20), "nginx to listen") {
            guard self.process.isRunning else { return true }
            guard let socket = try? connectedSocket(port: port) else { return false }
            close(socket)
            return true
        }
        guard listening, process.isRunning else {
            throw DevToolsError(
                message:
                    "nginx did not start: \(process.standardError)\n\((try? String(contentsOf: folder.appending(path: "error.log"), encoding: .utf8)) ?? "")"
            )
        }
    }

    var url: URL { URL(string: "https://127.0.0.1:\(port)")! }

    func stop() async {
        process.signal(SIGQUIT)
        if await process.exitStatus(within: .seconds(5)) == nil { await process.kill() }
        try? FileManager.default.removeItem(at: folder)
    }
}

import Foundation

/// A self-signed certificate for 127.0.0.1 and `localhost`, made by openssl in a folder of its
/// own (removed by `remove()`): a server's certificate and its own authority, which a client
/// is told to trust (`ServerTrust.certificates(pemFile:)`, `--cacert`, PostgreSQL's
/// `sslrootcert`).
public struct TestCertificate: Sendable {
    /// openssl, where Debian puts it (`apt-get install openssl`).
    public static let openssl = URL(fileURLWithPath: "/usr/bin/openssl")

    public let folder: URL
    /// The certificate, PEM.
    public let certificate: URL
    /// Its private key, PEM.
    public let key: URL

    /// Makes one, valid for a day.
    public static func make() async throws -> TestCertificate {
        let folder = FileManager.default.temporaryDirectory.appending(path: "fanout-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let made = TestCertificate(folder: folder, certificate: folder.appending(path: "cert.pem"), key: folder.appending(path: "key.pem"))
        let outcome = try await runToExit(
            executable: openssl,
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", made.key.path, "-out", made.certificate.path, "-days", "1",
                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            ])
        guard outcome.status == 0 else {
            made.remove()
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "openssl req: \(outcome.standardError)"])
        }
        return made
    }

    /// The SHA-256 of the certificate's public key, base64: what Chromium's
    /// `--ignore-certificate-errors-spki-list` names to trust this certificate alone.
    public func publicKeyHash() async throws -> String {
        let outcome = try await runToExit(
            executable: URL(fileURLWithPath: "/bin/sh"),
            [
                "-c",
                "\"$0\" x509 -in \"$1\" -pubkey -noout | \"$0\" pkey -pubin -outform der | \"$0\" dgst -sha256 -binary | base64",
                Self.openssl.path, certificate.path,
            ])
        guard outcome.status == 0 else {
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "openssl: \(outcome.standardError)"])
        }
        return outcome.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    public func remove() { try? FileManager.default.removeItem(at: folder) }
}

import Foundation
import NIOSSL

/// The server's TLS from `--tls-cert` and `--tls-key`: read and checked at start, so that a
/// missing file, a file that is not PEM, or a key of another certificate stops the server with
/// the reason, rather than failing every handshake.
enum ServerTLS {
    /// The server's TLS configuration for the certificate (with its chain) and key files.
    ///
    /// - Throws: `StartupFailure` naming the file and what is wrong with it.
    static func configuration(certificate: String, key: String) throws -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificate)
        } catch {
            throw StartupFailure(
                description: "cannot use --tls-cert \(certificate): \(reason(error, file: certificate, holding: "a PEM certificate"))")
        }
        guard !chain.isEmpty else {
            throw StartupFailure(
                description: "cannot use --tls-cert \(certificate): it holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        let privateKey: NIOSSLPrivateKey
        do {
            privateKey = try NIOSSLPrivateKey(file: key, format: .pem)
        } catch {
            throw StartupFailure(description: "cannot use --tls-key \(key): \(reason(error, file: key, holding: "a PEM private key"))")
        }
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
        // BoringSSL checks that the key is the certificate's when the context is made.
        do {
            _ = try NIOSSLContext(configuration: configuration)
        } catch {
            throw StartupFailure(
                description: "--tls-key \(key) is not the private key of the certificate in --tls-cert \(certificate) (\(error))")
        }
        return configuration
    }

    /// A warning for a certificate that has expired or expires within 30 days, else nil.
    static func expiryWarning(_ configuration: TLSConfiguration, now: Date = Date()) -> String? {
        guard case .certificate(let leaf)? = configuration.certificateChain.first else { return nil }
        let notAfter = Date(timeIntervalSince1970: TimeInterval(leaf.notValidAfter))
        if notAfter <= now {
            return "the TLS certificate (--tls-cert) expired on \(notAfter.formatted(.iso8601)): clients refuse it; renew it and restart"
        }
        if notAfter.timeIntervalSince(now) < 30 * 86_400 {
            return "the TLS certificate (--tls-cert) expires on \(notAfter.formatted(.iso8601)): renew it and restart before then"
        }
        return nil
    }

    private static func reason(_ error: any Error, file: String, holding what: String) -> String {
        guard FileManager.default.fileExists(atPath: file) else { return "no such file" }
        guard FileManager.default.isReadableFile(atPath: file) else { return "the file cannot be read (permissions)" }
        return "it does not hold \(what) (\(error))"
    }
}

import Foundation
import NIOSSL

/// Which certificates an `https://` or `wss://` server may present: those the system trusts
/// (the default), or those signed by certificate authorities the app names — a company's own CA,
/// or a development server's self-signed certificate. The host name (or IP address) is checked
/// against the certificate either way.
///
/// ```swift
/// let trust = try ServerTrust.certificates(pemFile: Bundle.main.url(forResource: "carts-ca", withExtension: "pem")!)
/// let store = RemoteCartStore(server: URL(string: "https://carts.internal:8443")!, trust: trust)
/// ```
public struct ServerTrust: Sendable {
    /// The client's TLS, made once: contexts are costly to make and shared by every connection.
    /// (Making one with the system's roots fails only where BoringSSL cannot start: each
    /// connection then fails with the reason.)
    let context: Result<NIOSSLContext, any Error>

    /// The system's trust roots.
    public static let system = ServerTrust(context: Result { try NIOSSLContext(configuration: .makeClientConfiguration()) })

    /// The certificate authorities in a PEM file (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks), and only those: the system's roots are not trusted as well.
    ///
    /// - Throws: `RemoteStoreError.invalid` when the file cannot be read or holds no PEM
    ///   certificate.
    public static func certificates(pemFile: URL) throws(RemoteStoreError) -> ServerTrust {
        let bytes: [UInt8]
        do {
            bytes = Array(try Data(contentsOf: pemFile))
        } catch {
            throw unusable("cannot read \(pemFile.path): \(error.localizedDescription)")
        }
        return try certificates(pem: bytes, from: pemFile.path)
    }

    /// The certificate authorities in PEM text, and only those.
    ///
    /// - Throws: `RemoteStoreError.invalid` when the text holds no PEM certificate.
    public static func certificates(pem: String) throws(RemoteStoreError) -> ServerTrust {
        try certificates(pem: Array(pem.utf8), from: "the PEM text")
    }

    private static func certificates(pem: [UInt8], from source: String) throws(RemoteStoreError) -> ServerTrust {
        let roots: [NIOSSLCertificate]
        do {
            roots = try NIOSSLCertificate.fromPEMBytes(pem)
        } catch {
            throw unusable("\(source) holds no PEM certificate (\(error))")
        }
        guard !roots.isEmpty else { throw unusable("\(source) holds no PEM certificate (-----BEGIN CERTIFICATE-----)") }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(roots)
        do {
            return ServerTrust(context: .success(try NIOSSLContext(configuration: configuration)))
        } catch {
            throw unusable("\(source): \(error)")
        }
    }

    private static func unusable(_ message: String) -> RemoteStoreError {
        .invalid(FanoutError(.malformedRequest, "not certificates to trust: \(message)"))
    }
}

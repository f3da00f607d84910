import CartStore
import FanoutTestSupport
import Foundation
import Testing

@testable import CartStorePostgres

/// A PostgreSQL URL's `sslmode` (and `sslrootcert`), as libpq reads them: honoured against a
/// server that offers TLS and one that does not. It was silently ignored: an operator who wrote
/// `sslmode=require` had every connection in the clear.
@Suite("PostgreSQL TLS", .tags(.postgres), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct PostgresTLSTests {
    @Test func theURLsSSLModeIsReadAndAnythingElseIsRefused() throws {
        for mode in PostgresLocation.TLSMode.allCases {
            #expect(try PostgresLocation(url: "postgres://u@db.internal/carts?sslmode=\(mode.rawValue)").tlsMode == mode)
        }
        #expect(try PostgresLocation(url: "postgres://u@db.internal/carts").tlsMode == .prefer, "libpq's default")
        let verified = try PostgresLocation(url: "postgres://u@db.internal/carts?sslmode=verify-full&sslrootcert=/etc/ca.pem")
        #expect(verified.rootCertificates == "/etc/ca.pem")
        let refused = [
            ("sslmode=allow", "sslmode=allow is not supported"),
            ("sslmode=REQUIRE", "sslmode=REQUIRE is not supported"),
            ("sslmode=", "sslmode= is not supported"),
            ("sslcert=/client.pem", "parameter sslcert is not supported"),
            ("application_name=x", "parameter application_name is not supported"),
            ("sslmode=require&sslrootcert=/etc/ca.pem", "sslrootcert is used by sslmode=verify-ca or verify-full only"),
            ("sslmode=verify-full&sslrootcert=", "sslrootcert names no file"),
        ]
        for (query, reason) in refused {
            #expect("\(query)") {
                _ = try PostgresLocation(url: "postgres://u:secret@db.internal/carts?\(query)")
            } throws: { error in
                CartStoreError.code(error) == .storeUnavailable && "\(error)".contains(reason) && !"\(error)".contains("secret")
            }
        }
    }

    /// Every mode that asks for TLS gets it from a server that offers it: the store's sessions
    /// are encrypted (`pg_stat_ssl`), a change goes through; `verify-full` with the server's CA
    /// connects, and without it (the system's CAs do not know a self-signed certificate) is
    /// refused, saying why; `disable` stays in the clear.
    @Test(.needsPostgreSQLPrograms) func aServerOfferingTLSIsReachedWithItAsEachModeSays() async throws {
        let made = try await TestCertificate.make()
        defer { made.remove() }
        let (certificate, key) = (made.certificate, made.key)
        let server = try await PostgresServer.startCluster(tls: (certificate, key))
        let modes: [(name: String, query: String, encrypted: Bool)] = [
            ("tls_prefer", "sslmode=prefer", true),
            ("tls_require", "sslmode=require", true),
            ("tls_verify_ca", "sslmode=verify-ca&sslrootcert=\(certificate.path)", true),
            ("tls_verify_full", "sslmode=verify-full&sslrootcert=\(certificate.path)", true),
            ("tls_disable", "sslmode=disable", false),
        ]
        for mode in modes {
            let url = try await server.makeDatabase(named: mode.name) + "?" + mode.query
            let store = try await PostgresCartStore.running(url: url)
            let answer = try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1)
            #expect(answer.event.seq == 1, "\(mode.query)")
            let sessions = try await server.psql(
                "SELECT count(*), count(*) FILTER (WHERE ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE datname = '\(mode.name)' AND application_name = 'fanout'"
            )
            let counts = sessions.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").compactMap { Int($0) }
            #expect(counts.count == 2 && counts[0] >= 1, "\(mode.query): sessions \(sessions)")
            #expect(counts.last == (mode.encrypted ? counts.first : 0), "\(mode.query): \(sessions) (all, encrypted)")
            try store.close()
        }
        let unverified = try await server.makeDatabase(named: "tls_untrusted") + "?sslmode=verify-full"
        await #expect {
            _ = try await PostgresCartStore.running(url: unverified)
        } throws: { error in
            CartStoreError.code(error) == .storeUnavailable && "\(error)".contains("cannot connect")
                && "\(error)".lowercased().contains("certificate")
        }
        await server.stop()
    }

    /// `require` against a server that offers no TLS: refused at start, saying so, instead of
    /// a connection in the clear; `prefer` connects in the clear.
    @Test(.needsPostgreSQL) func requireIsRefusedByAServerWithoutTLSAndPreferConnectsInTheClear() async throws {
        let url = try await SharedPostgres.shared.newDatabase()
        await #expect {
            _ = try await PostgresCartStore.running(url: url + "?sslmode=require")
        } throws: { error in
            CartStoreError.code(error) == .storeUnavailable && "\(error)".contains("the server does not offer TLS")
        }
        let store = try await PostgresCartStore.running(url: url + "?sslmode=prefer")
        defer { try? store.close() }
        #expect(try await store.addItem(cartID: "c", sku: "a", quantity: 1, unitPriceCents: 1).event.seq == 1)
    }
}

import FanoutTestSupport
import Foundation
import Testing

/// The throwaway PostgreSQL server of the tests (FanoutTestSupport's `PostgresServer`), driven
/// by a real client, psql: what the PostgreSQL store's tests will stand on.
///
/// Needs PostgreSQL (`apt-get install postgresql`; `.ci/run` installs it). Without it these
/// tests are skipped, saying so, except in CI (`CI` set), where they fail.
@Suite("PostgreSQL test server", .tags(.postgres, .processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct PostgresServerTests {
    /// What every PostgreSQL test does: a database of its own, written and read back by a client.
    @Test(.needsPostgreSQL)
    func aTestsOwnDatabaseIsWrittenAndReadBackAndSeparateFromAnother() async throws {
        let server = try await PostgresServer.start()
        #expect(try await server.psql("SELECT 1 + 1") == "2\n", "the server's own database answers")
        let first = try await server.makeDatabase(named: "harness_first")
        _ = try await server.psql(
            "CREATE TABLE carts (id text PRIMARY KEY, total_cents integer NOT NULL)",
            "INSERT INTO carts VALUES ('alice', 610)", on: first)
        #expect(try await server.psql("SELECT id, total_cents FROM carts", on: first) == "alice|610\n", "read back in a new session")

        let second = try await server.makeDatabase(named: "harness_second")
        #expect(second != first)
        #expect(try await server.psql("SELECT current_database()", on: second) == "harness_second\n")
        #expect(try await server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", on: second) == "0\n", "empty")
        // A throw above skips this; the server's deinit then ends the cluster.
        await server.stop()
    }

    @Suite(
        .enabled(
            if: PostgresServer.isInstalled || runningInCI, "apt-get install postgresql enables the tests of the throwaway PostgreSQL server"
        ))
    struct ThrowawayCluster {
        @Test func itListensOnItsURLUntilStoppedAndLeavesNothingBehind() async throws {
            let server = try await PostgresServer.startCluster()
            let directory = try #require(server.directory)
            #expect(server.url == "postgres://fanout@127.0.0.1:\(server.port)/fanout")
            #expect(
                try await server.psql("SELECT current_user, current_database(), inet_server_port()") == "fanout|fanout|\(server.port)\n")
            #expect(FileManager.default.fileExists(atPath: directory.appending(path: "data/PG_VERSION").path))

            await server.stop()
            #expect(throws: POSIXError.self, "the port refuses connections") { close(try connectedSocket(port: server.port)) }
            #expect(!FileManager.default.fileExists(atPath: directory.path), "its folder is removed")
            await server.stop()  // a second stop does nothing
        }

        @Test func twoRunAtOnceOnTheirOwnPorts() async throws {
            async let first = PostgresServer.startCluster()
            async let second = PostgresServer.startCluster()
            let servers = try await [first, second]
            #expect(servers[0].port != servers[1].port)
            #expect(servers[0].directory != servers[1].directory)
            _ = try await servers[0].psql("CREATE TABLE only_here (id integer)")
            for server in servers {
                #expect(try await server.psql("SELECT inet_server_port()") == "\(server.port)\n")
            }
            #expect(try await servers[1].psql("SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'") == "0\n")
            for server in servers { await server.stop() }
        }
    }
}

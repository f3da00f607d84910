import FanoutTestSupport
import Foundation
import Testing

/// `fanout-client cart …` against the real server: what a user reads in the terminal.
@Suite("Cart commands", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(2)))
struct CartCommandTests {
    /// Runs `fanout-client` to its end: exit status, stdout, stderr.
    static func client(_ arguments: [String]) async throws -> (status: Int32, output: String, error: String) {
        let outcome = try await runToExit("fanout-client", arguments)
        #expect(!outcome.timedOut, "fanout-client \(arguments.joined(separator: " ")) did not exit")
        return (outcome.status, outcome.standardOutput, outcome.standardError)
    }

    @Test func cartCommandsPrintTheServersTypedAnswers() async throws {
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let server = try await ServerProcess(arguments: ["--port", "0", "--db", database, "--token", "t0k"])
        defer { server.signal(SIGTERM) }
        let connection = ["--url", "http://127.0.0.1:\(server.port)", "--token", "t0k"]

        let add = try await Self.client(
            ["cart", "add", "alice", "apple", "--quantity", "2", "--price", "50", "--name", "Green apple"] + connection)
        #expect(add.status == 0, "stderr: \(add.error)")
        #expect(
            add.output == """
                alice  v1  2 items  1.00  (seq 1)
                  2 × apple Green apple @ 0.50 = 1.00
                event seq 1, delivered to 0 subscribers

                """)
        let set = try await Self.client(["cart", "set", "alice", "apple", "5"] + connection)
        #expect(set.output.hasPrefix("alice  v2  5 items  2.50  (seq 2)\n"), "\(set.output)")
        let list = try await Self.client(["cart", "list"] + connection)
        #expect(list.output == "alice  v2  5 items  2.50\n")
        let show = try await Self.client(["cart", "show", "alice"] + connection)
        #expect(show.output == "alice  v2  5 items  2.50  (seq 2)\n  5 × apple Green apple @ 0.50 = 2.50\n")

        let missing = try await Self.client(["cart", "show", "ghost"] + connection)
        #expect(missing.status == 1)
        #expect(missing.error.contains("server refused (404 cart_not_found): no cart ghost"), "stderr: \(missing.error)")
        let unauthorized = try await Self.client(["cart", "clear", "alice", "--url", "http://127.0.0.1:\(server.port)"])
        #expect(unauthorized.status == 1)
        #expect(unauthorized.error.contains("401 unauthorized"), "stderr: \(unauthorized.error)")
    }

    /// A value no server would take is refused before anything is sent, with the rule, and the
    /// same exit status (64, a usage error) from every command: a bad cart id exited 1 from
    /// `cart show` and 64 from `subscribe`; `--price -5` said "Missing value".
    @Test func badValuesAreRefusedWithTheRuleAndOneExitStatus() async throws {
        let refused: [([String], String)] = [
            (["cart", "show", "bad id"], "a cart id is 1–64 characters"),
            (["cart", "clear", "bad id"], "a cart id is 1–64 characters"),
            (["subscribe", "--cart", "bad id"], "a cart id is 1–64 characters"),
            (["cart", "add", "alice", "apple", "--quantity", "2", "--price", "-5"], "--price (cents) must be 0…1000000000 (got -5)"),
            (["cart", "add", "alice", "apple", "--quantity", "0", "--price", "5"], "quantity must be 1…10000 (got 0)"),
            (["cart", "set", "alice", "bad sku", "3"], "a sku is 1–64 characters"),
            // A negative number where a value goes is that value, refused by its rule (it was
            // taken for an option: "Missing expected argument '<quantity>'").
            (["cart", "set", "alice", "apple", "-1"], "quantity must be 0…10000 (got -1)"),
            // A mistyped option is named, with the one meant (a missing --quantity was reported
            // instead), and so is a mistyped command ("Unknown option '--url'" before).
            (["cart", "add", "alice", "apple", "--qty", "2", "--price", "5"], "Unknown option '--qty'. Did you mean '--quantity'?"),
            (["cart", "add", "alice", "apple", "--quantity", "2", "--prise", "5"], "Unknown option '--prise'. Did you mean '--price'?"),
            (["cart", "lst"], "'lst' is not a command of cart (list, show, add, set, remove, clear); did you mean 'list'?"),
            (["subscrib"], "'subscrib' is not a command of fanout-client (subscribe, cart); did you mean 'subscribe'?"),
        ]
        // Nothing listens on port 1: a value that got past the check would fail to connect (exit 1).
        for (arguments, rule) in refused {
            let answer = try await Self.client(
                arguments + ["--url", arguments[0].hasPrefix("subscri") ? "ws://127.0.0.1:1/subscribe" : "http://127.0.0.1:1"])
            #expect(answer.status == 64, "\(arguments): \(answer.error)")
            #expect(answer.error.contains(rule), "\(arguments): \(answer.error)")
        }
        // One server address for both commands: not a server's, it is refused by both alike.
        for command in [["subscribe"], ["cart", "list"]] {
            let answer = try await Self.client(command + ["--url", "ftp://127.0.0.1:1"])
            #expect(answer.status == 64, "\(command): \(answer.error)")
            #expect(answer.error.contains("--url must be the server's http:// or https:// address"), "\(command): \(answer.error)")
        }
    }
}

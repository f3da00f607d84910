import ArgumentParser
import FanoutProtocol

/// `fanout-client`: watch carts change, and change them, from a terminal.
@main
struct FanoutClient: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout-client",
        abstract: "Watch and change the carts of a fanout-server.",
        discussion: """
            Examples:
              fanout-client subscribe --url ws://127.0.0.1:8080/subscribe
              fanout-client cart add alice apple --quantity 2 --price 50
            """,
        version: FanoutVersion.current,
        subcommands: [SubscribeCommand.self, CartCommand.self])
}

/// A failure to report on stderr with a non-zero exit, never a stack trace.
struct ClientFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

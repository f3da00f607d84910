import ArgumentParser
import CommandLineRepair
import FanoutClient
import FanoutProtocol
import Foundation

/// `fanout-client`: watch carts change, and change them, from a terminal.
@main
struct FanoutClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fanout-client",
        abstract: "Watch and change the carts of a fanout-server.",
        discussion: """
            Examples:
              fanout-client subscribe --url http://127.0.0.1:8080
              fanout-client cart add alice apple --quantity 2 --price 50
            """,
        version: FanoutVersion.current,
        subcommands: [SubscribeCommand.self, CartCommand.self])

    /// ArgumentParser's `main`, with its messages for a mistyped command or option, and for a
    /// negative number where a value goes, put as a person would (`ArgumentRepair`).
    static func main() async {
        let arguments = ArgumentRepair.negativeNumbersAsValues(Array(CommandLine.arguments.dropFirst()))
        await ArgumentRepair.run(ArgumentRepair.parse(arguments, as: Self.self), of: Self.self)
    }
}

/// `--cacert FILE`: the certificate authorities an `https://` or `wss://` server's certificate
/// must be signed by, instead of the system's (as curl's option of the same name).
struct TrustOptions: ParsableArguments {
    @Option(
        name: .customLong("cacert"),
        help: ArgumentHelp(
            "Trust https:// and wss:// servers whose certificate this PEM file's authorities signed (a private CA, a self-signed server), instead of the system's.",
            valueName: "file"))
    var caCertificates: String?

    /// The trust to connect with; a file that is not PEM certificates is an argument error (64).
    func trust() throws -> ServerTrust {
        guard let caCertificates else { return .system }
        do {
            return try .certificates(pemFile: URL(fileURLWithPath: caCertificates))
        } catch {
            guard case .invalid(let failure) = error else { throw ValidationError("--cacert \(caCertificates): \(error)") }
            throw ValidationError("--cacert \(caCertificates): \(failure.message)")
        }
    }
}

/// A failure to report on stderr with a non-zero exit, never a stack trace.
struct ClientFailure: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

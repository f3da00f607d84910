import ArgumentParser
import Foundation

/// `fanout-server token`: prints a signed token for one user, HS256 with the server's
/// `--jwt-secret`, for development, tests and scripts. A shop's backend mints its own the same
/// way (see docs/OPERATING.md).
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a signed token (HS256, with --jwt-secret) that reads, and maybe changes, some carts.",
        discussion: """
            Example: fanout-server token --jwt-secret SECRET --sub alice --carts alice,alice-wishlist --scope "read write" --ttl 1h
            """)

    @Option(help: "Who the token is for (its sub).")
    var sub: String

    @Option(help: "The cart ids it may see, comma-separated, or * for every cart.")
    var carts: String

    @Option(help: "What it may do: read, write, or \"read write\".")
    var scope: String = "read"

    @Option(help: "How long it is valid: seconds, or a number with s, m, h or d (1h, 30m).")
    var ttl: String = "1h"

    @Option(name: .customLong("aud"), help: "An audience to name in aud (repeatable), for a server with --jwt-audience.")
    var audiences: [String] = []

    /// `--jwt-secret`: the server's option, and this command's (given before or after `token`).
    struct Signing: ParsableArguments {
        @Option(
            name: .customLong("jwt-secret"),
            help: ArgumentHelp(
                "Accept end users' HS256 tokens signed with this secret (32 bytes or more; a shorter one works, with a warning), each limited to its carts and scope; `token` signs with it (or set FANOUT_JWT_SECRET).",
                valueName: "secret"))
        var jwtSecret: String?

        /// The secret from the option, else from `FANOUT_JWT_SECRET`; an empty one is none.
        func secret(environment: [String: String]) -> String? {
            (jwtSecret ?? environment["FANOUT_JWT_SECRET"]).flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    @OptionGroup var signing: Signing

    func validate() throws {
        guard Self.seconds(ttl) != nil else {
            throw ValidationError("--ttl must be like 90, 90s, 30m, 1h or 7d, from 1 s to \(Int(Self.maxTTL / 86_400))d")
        }
        guard !sub.isEmpty else { throw ValidationError("--sub must not be empty") }
        if let problem = UserToken.problem(withSubject: sub) { throw ValidationError("--sub \(problem)") }
        let scopes = scope.split(separator: " ")
        guard !scopes.isEmpty, scopes.allSatisfy({ $0 == "read" || $0 == "write" }) else {
            throw ValidationError("--scope must be read, write, or \"read write\"")
        }
        // Here rather than in `run`: a validation error is told with this command's usage.
        guard signing.secret(environment: ProcessInfo.processInfo.environment) != nil else {
            throw ValidationError("give the server's secret with --jwt-secret or FANOUT_JWT_SECRET")
        }
    }

    func run() async throws {
        guard let secret = signing.secret(environment: ProcessInfo.processInfo.environment) else {
            throw ValidationError("give the server's secret with --jwt-secret or FANOUT_JWT_SECRET")
        }
        let now = Date()
        let token = UserToken(
            subject: sub, carts: carts.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }, scope: scope,
            expiresAt: now.addingTimeInterval(Self.seconds(ttl) ?? 3_600), issuedAt: now, audience: audiences)
        if let weakness = TokenKeys.weakness(of: secret) {
            FileHandle.standardError.write(Data("warning: \(weakness)\n".utf8))
        }
        print(try await TokenKeys.sign(token, secret: secret))
    }

    /// The longest `--ttl`: ten years (a token's `exp` must be a date a JWT can carry).
    static let maxTTL: TimeInterval = 3_650 * 86_400

    /// `90`, `90s`, `30m`, `1h`, `7d` in seconds; nil for anything else, or outside 1 s…`maxTTL`.
    static func seconds(_ text: String) -> TimeInterval? {
        let units: [Character: TimeInterval] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        var number = Substring(text)
        var unit: TimeInterval = 1
        if let last = text.last, let multiplier = units[last] {
            number = text.dropLast()
            unit = multiplier
        }
        guard let value = Double(number), (1...maxTTL).contains(value * unit) else { return nil }
        return value * unit
    }
}

import ArgumentParser
import Foundation

/// What ArgumentParser says wrongly about a command line, said as a person would: a mistyped
/// command, an option that does not exist when a required one is also missing (ArgumentParser
/// names the missing one), and a negative number where a value goes (which it takes for an
/// option, then says the value is missing).
public enum ArgumentRepair {
    /// The arguments with each negative number that stands alone (not an option's value) moved
    /// after `--`, where ArgumentParser reads it as the next positional value: `cart set alice
    /// apple -1` reaches the quantity's check ("a quantity is …, got -1") instead of "missing
    /// expected argument '<quantity>'". Every option of fanout-client but `--presence` takes a
    /// value, so a number after an option is that option's value and stays where it is.
    public static func negativeNumbersAsValues(_ arguments: [String]) -> [String] {
        guard !arguments.contains("--") else { return arguments }
        var kept: [String] = []
        var moved: [String] = []
        for argument in arguments {
            let isNegativeNumber = argument.count > 1 && argument.first == "-" && argument.dropFirst().allSatisfy(\.isNumber)
            let previous = kept.last
            let isOptionsValue = previous.map { $0.hasPrefix("--") && !$0.contains("=") && $0 != "--presence" } ?? false
            if isNegativeNumber && !isOptionsValue { moved.append(argument) } else { kept.append(argument) }
        }
        return moved.isEmpty ? arguments : kept + ["--"] + moved
    }

    /// A better first line for the parse error of `arguments`, if there is one: a command that
    /// does not exist, or an option the command does not have (ArgumentParser reports a missing
    /// required option first). `usage` is ArgumentParser's message for the error: it holds the
    /// usage of the command the arguments reached, whose options are the ones it has.
    public static func betterError(for arguments: [String], root: any ParsableCommand.Type, usage: String) -> String? {
        var command = root
        for argument in arguments {
            guard !argument.hasPrefix("-") else { break }
            let names = command.configuration.subcommands.map { $0._commandName }
            guard !names.isEmpty else { break }
            guard let next = command.configuration.subcommands.first(where: { $0._commandName == argument }) else {
                let suggestion = closest(to: argument, among: names).map { "; did you mean '\($0)'?" } ?? ""
                let name = command._commandName
                return "'\(argument)' is not a command of \(name) (\(names.joined(separator: ", ")))\(suggestion)"
            }
            command = next
        }
        // ArgumentParser names an unknown option itself when nothing else is wrong; and a usage
        // that says `<options>` does not list them.
        guard !usage.hasPrefix("Error: Unknown option"), !usage.contains("<options>") else { return nil }
        let known = Set(usage.split(whereSeparator: { " []<>.,|=()\n".contains($0) }).filter { $0.hasPrefix("--") }.map(String.init))
            .union(["--help", "--version"])
        for argument in arguments {
            if argument == "--" { break }
            guard argument.hasPrefix("--"), argument.count > 2 else { continue }
            let name = String(argument.split(separator: "=", maxSplits: 1)[0])
            guard !known.contains(name) else { continue }
            let suggestion = closest(to: name, among: Array(known)).map { ". Did you mean '\($0)'?" } ?? ""
            return "Unknown option '\(name)'\(suggestion)"
        }
        return nil
    }

    /// Parses `arguments` as `root`'s command line, as ArgumentParser's `parseAsRoot`, and on a
    /// parse error exits with ArgumentParser's message, or a better one (`betterError`).
    public static func parse(_ arguments: [String], as root: any ParsableCommand.Type) -> any ParsableCommand {
        do {
            return try root.parseAsRoot(arguments)
        } catch {
            // A parse error's message holds the usage of the command the arguments reached.
            if root.exitCode(for: error) == .validationFailure,
                let better = betterError(for: arguments, root: root, usage: root.fullMessage(for: error))
            {
                let usage = root.fullMessage(for: error).split(separator: "\n").drop { !$0.hasPrefix("Usage:") }.joined(separator: "\n")
                FileHandle.standardError.write(Data("Error: \(better)\n\(usage)\n".utf8))
                root.exit(withError: ExitCode.validationFailure)
            }
            root.exit(withError: error)
        }
    }

    /// Runs a parsed command as ArgumentParser's `main` does, exiting with its error if it throws.
    public static func run(_ command: any ParsableCommand, of root: any ParsableCommand.Type) async -> Never {
        var command = command
        do {
            if var asynchronous = command as? any AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
        } catch {
            root.exit(withError: error)
        }
        root.exit()
    }

    /// The candidate within a third of its length in edits of `word`, else the shortest one
    /// `word` abbreviates (its letters in order: `--qty` for `--quantity`), if any.
    static func closest(to word: String, among candidates: [String]) -> String? {
        if let near = candidates.map({ ($0, distance(word, $0)) }).filter({ $0.1 <= max(1, $0.0.count / 3) }).min(by: { $0.1 < $1.1 }) {
            return near.0
        }
        return candidates.filter { abbreviates(word, $0) }.min { $0.count < $1.count }
    }

    /// Whether `word`'s letters appear in `candidate` in order, starting with its first.
    private static func abbreviates(_ word: String, _ candidate: String) -> Bool {
        let letters = word.drop { $0 == "-" }
        let target = candidate.drop { $0 == "-" }
        guard let first = letters.first, target.first == first else { return false }
        var rest = target[...]
        for letter in letters {
            guard let found = rest.firstIndex(of: letter) else { return false }
            rest = rest[rest.index(after: found)...]
        }
        return true
    }

    /// Levenshtein distance.
    private static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        guard !a.isEmpty else { return b.count }
        var row = Array(0...b.count)
        for i in 1...a.count {
            var previous = row[0]
            row[0] = i
            for j in stride(from: 1, through: b.count, by: 1) {
                let kept = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = kept
            }
        }
        return row[b.count]
    }
}

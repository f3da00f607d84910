import Dispatch
import FanoutClient
import Foundation
import Testing

/// The docs' FanoutClient examples are the ones compiled in `DocumentedExamples` (in this Swift 6
/// target, and with the main actor as default isolation), so an example cannot name an API that
/// is gone: each block of the docs is checked against its compiled copy.
@Suite("README client example")
struct ReadmeClientExampleTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The Swift blocks of the document at `path` (from the repository).
    static func swiftBlocks(of path: String) throws -> [String] {
        let text = try String(contentsOf: repository.appending(path: path), encoding: .utf8)
        return text.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
    }

    /// The compiled copy between `// NAME block begins` and `// NAME block ends`, unindented.
    static func compiled(_ name: String) throws -> String {
        let source = try String(contentsOf: DocumentedExamples.file, encoding: .utf8)
        let compiled = source.components(separatedBy: "        // \(name) block begins\n")[1]
            .components(separatedBy: "        // \(name) block ends")[0]
        return compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
            .trimmingCharacters(in: .newlines)
    }

    static let imports = "import FanoutClient\nimport Foundation\n\n"

    /// README "Observing a server's carts from Swift": its block that imports FanoutClient.
    @Test func theREADMEsClientBlockIsTheCompiledOne() throws {
        let blocks = try Self.swiftBlocks(of: "README.md").filter { $0.hasPrefix("import FanoutClient\n") }
        #expect(blocks.count == 1, "one FanoutClient block in the README, kept compiled here")
        #expect(blocks.first == Self.imports + (try Self.compiled("README")))
    }

    /// The article "Observing carts on a server" opens with a block compiled the same way.
    @Test func theDocCArticlesBlockIsTheCompiledOne() throws {
        let blocks = try Self.swiftBlocks(of: "Sources/FanoutClient/FanoutClient.docc/ObservingCartsOnAServer.md")
        #expect(blocks.first == Self.imports + (try Self.compiled("DocC")))
    }

    /// "Working offline" opens with a block compiled there too (it named
    /// `URL.applicationSupportDirectory`, which Linux's Foundation does not have).
    @Test func theWorkingOfflineBlockIsTheCompiledOne() throws {
        let blocks = try Self.swiftBlocks(of: "Sources/FanoutClient/FanoutClient.docc/WorkingOffline.md")
        #expect(blocks.first == (try Self.compiled("Working offline")))
    }
}

import Dispatch
import FanoutClient
import Foundation
import Testing

/// README "Observing a server's carts from Swift": the block between the markers is the
/// README's Swift block that imports FanoutClient, compiled with this test target against the
/// library as it is, so the example cannot name an API that is gone.
@Suite("README client example")
struct ReadmeClientExampleTests {
    @Test func theREADMEsClientBlockIsTheCompiledOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: repository.appending(path: "README.md"), encoding: .utf8)
        let head = "import FanoutClient\nimport Foundation\n\n"
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
            .filter { $0.hasPrefix("import FanoutClient\n") }
        #expect(blocks.count == 1, "one FanoutClient block in the README, kept compiled here")
        let source = try String(contentsOf: DocumentedExamples.file, encoding: .utf8)
        let compiled = source.components(separatedBy: "        // README block begins\n")[1]
            .components(separatedBy: "        // README block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(blocks.first == head + unindented.trimmingCharacters(in: .newlines))
    }

    /// The article "Observing carts on a server" opens with a block compiled here the same way.
    @Test func theDocCArticlesBlockIsTheCompiledOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let article = try String(
            contentsOf: repository.appending(path: "Sources/FanoutClient/FanoutClient.docc/ObservingCartsOnAServer.md"), encoding: .utf8)
        let head = "import FanoutClient\nimport Foundation\n\n"
        let block = article.components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "\n```")[0]
        let source = try String(contentsOf: DocumentedExamples.file, encoding: .utf8)
        let compiled = source.components(separatedBy: "        // DocC block begins\n")[1]
            .components(separatedBy: "        // DocC block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(block == head + unindented.trimmingCharacters(in: .newlines))
    }

    /// "Working offline" opens with a block compiled there too (it named
    /// `URL.applicationSupportDirectory`, which Linux's Foundation does not have).
    @Test func theWorkingOfflineBlockIsTheCompiledOne() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let article = try String(
            contentsOf: repository.appending(path: "Sources/FanoutClient/FanoutClient.docc/WorkingOffline.md"), encoding: .utf8)
        let block = article.components(separatedBy: "```swift\n").dropFirst().first?.components(separatedBy: "\n```")[0]
        let source = try String(contentsOf: DocumentedExamples.file, encoding: .utf8)
        let compiled = source.components(separatedBy: "        // Working offline block begins\n")[1]
            .components(separatedBy: "        // Working offline block ends")[0]
        let unindented = compiled.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }.joined(separator: "\n")
        #expect(block == unindented.trimmingCharacters(in: .newlines))
    }
}

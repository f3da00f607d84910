import PackagePlugin

/// Compiles the files the server serves as they are kept in the repository into the target, so
/// `fanout-server` serves them from any working directory with nothing to install beside it:
///
/// - `docs/openapi.json` as `embeddedOpenAPIDocument`, at `GET /openapi.json`;
/// - `Sources/FanoutServer/Page/index.html` as `embeddedPage`, the live cart page at `GET /`,
///   and its script, `page.js`, as `embeddedPageScript`, at `GET /page.js`.
@main
struct EmbedServedFiles: BuildToolPlugin {
    /// Each file, relative to the package, and the Swift name its bytes get.
    static let files: [(path: String, name: String)] = [
        ("docs/openapi.json", "embeddedOpenAPIDocument"),
        ("Sources/FanoutServer/Page/index.html", "embeddedPage"),
        ("Sources/FanoutServer/Page/page.js", "embeddedPageScript"),
    ]

    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let tool = try context.tool(named: "embed-file").url
        return Self.files.map { file in
            let input = context.package.directoryURL.appending(path: file.path)
            let output = context.pluginWorkDirectoryURL.appending(path: "\(file.name).swift")
            return .buildCommand(
                displayName: "Embedding \(file.path) into \(target.name)",
                executable: tool,
                arguments: [output.path, file.name, input.path],
                inputFiles: [input],
                outputFiles: [output])
        }
    }
}

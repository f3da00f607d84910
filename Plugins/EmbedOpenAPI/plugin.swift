import PackagePlugin

/// Compiles `docs/openapi.json` into the target (as `embeddedOpenAPIDocument`), so the server
/// serves the document kept in the repository at `GET /openapi.json`, from any directory.
@main
struct EmbedOpenAPI: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let document = context.package.directoryURL.appending(path: "docs/openapi.json")
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedOpenAPI.swift")
        return [
            .buildCommand(
                displayName: "Embedding docs/openapi.json into \(target.name)",
                executable: try context.tool(named: "embed-file").url,
                arguments: [output.path, "embeddedOpenAPIDocument", document.path],
                inputFiles: [document],
                outputFiles: [output]
            )
        ]
    }
}

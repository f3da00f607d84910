import Foundation
import Hummingbird

/// `GET /openapi.json`: the OpenAPI 3.1 description of the HTTP API, `docs/openapi.json` as
/// it was when the binary was built (the `EmbedServedFiles` plugin carries it in).
struct OpenAPIController: Sendable {
    /// The document's bytes, decoded once.
    static let document = ByteBuffer(bytes: Data(base64Encoded: embeddedOpenAPIDocument) ?? Data())

    func addRoutes(to router: RouterGroup<FanoutRequestContext>) {
        router.get("openapi.json") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: Self.document))
        }
    }
}

import Foundation
import Hummingbird

/// `GET /openapi.json`: the OpenAPI 3.1 description of the HTTP API, `docs/openapi.json` as
/// it was when the binary was built (embedded in code through the link `OpenAPI/openapi.json`).
struct OpenAPIController: Sendable {
    /// The document's bytes.
    static let document = ByteBuffer(bytes: PackageResources.openapi_json)

    func addRoutes(to router: RouterGroup<FanoutRequestContext>) {
        router.get("openapi.json") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: Self.document))
        }
    }
}

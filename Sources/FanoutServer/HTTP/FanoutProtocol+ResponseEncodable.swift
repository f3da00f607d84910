import FanoutProtocol
import Hummingbird

// The HTTP answers are FanoutProtocol's types, shared with the client; here they become
// Hummingbird responses, encoded with `FanoutRequestContext.responseEncoder`.
extension CartsResponse: ResponseEncodable {}
extension CartResponse: ResponseEncodable {}

/// A mutation's answer, the one written on every change, is written by `JSONBytes` (the same
/// bytes as the encoder's, without building and sorting a tree of values each time).
extension MutationResponse: ResponseGenerator {
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        let json = self.json()
        return Response(
            status: .ok,
            headers: [.contentType: "application/json; charset=utf-8", .contentLength: String(json.count)],
            body: .init(byteBuffer: ByteBuffer(bytes: json)))
    }
}
extension EventsPage: ResponseEncodable {}
extension HealthResponse: ResponseEncodable {}

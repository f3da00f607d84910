import FanoutProtocol
import Hummingbird

// The HTTP answers are FanoutProtocol's types, shared with the client. Those written on every
// request are written by `JSONBytes` (the same bytes as `FanoutRequestContext.responseEncoder`
// would write, without building and sorting a tree of values each time: Foundation's encoder
// was a tenth of a one-cart read).

/// An answer written as JSON bytes by hand.
protocol JSONBytesResponse: ResponseGenerator {
    func json() -> [UInt8]
}

extension JSONBytesResponse {
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        Self.response(json())
    }

    /// The most carts or events an answer holds that is written where the request runs.
    static var largestOnLoop: Int { 64 }

    /// The answer, holding `count` carts or events, written off the connection's event loop
    /// when it holds more than `largestOnLoop`: a request runs on its connection's loop
    /// (`EventLoopTaskExecutor`), and writing thousands of carts or events there would hold up
    /// every subscriber of that loop for milliseconds. A smaller answer is written where it
    /// is, as a hop to Swift concurrency's pool and back costs more.
    func response(holding count: Int) async -> Response where Self: Sendable {
        guard count > Self.largestOnLoop else { return Self.response(json()) }
        return Self.response(await withTaskExecutorPreference(globalConcurrentExecutor) { self.json() })
    }

    private static func response(_ json: [UInt8]) -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "application/json; charset=utf-8", .contentLength: String(json.count)],
            body: .init(byteBuffer: ByteBuffer(bytes: json)))
    }
}

extension MutationResponse: JSONBytesResponse {}
extension CartResponse: JSONBytesResponse {}
extension CartsResponse: JSONBytesResponse {}
extension EventsPage: JSONBytesResponse {}
extension HealthResponse: JSONBytesResponse {}
extension PresenceResponse: ResponseEncodable {}

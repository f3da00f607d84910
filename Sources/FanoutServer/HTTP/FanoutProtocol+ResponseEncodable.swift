import FanoutProtocol
import Hummingbird

// The HTTP answers are FanoutProtocol's types, shared with the client; here they become
// Hummingbird responses, encoded with `FanoutRequestContext.responseEncoder`.
extension CartsResponse: ResponseEncodable {}
extension CartResponse: ResponseEncodable {}
extension MutationResponse: ResponseEncodable {}
extension EventsPage: ResponseEncodable {}
extension HealthResponse: ResponseEncodable {}

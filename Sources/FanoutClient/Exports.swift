// The cart value types (Cart, CartEvent, CartChange, …) and the wire messages are
// FanoutProtocol's, shared with the server and CartStore: `import FanoutClient` brings them.
@_exported import FanoutProtocol

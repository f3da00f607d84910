// The cart value types (Cart, CartItem, CartEvent, CartChange, CartLimits) live in
// FanoutProtocol so that clients share them without depending on SQLite; users of the store
// get them with `import CartStore`.
@_exported import FanoutProtocol
// `ObserverSet` is `WeakObserverSet` from WeakObservers, which FanoutClient shares.
@_exported import WeakObservers

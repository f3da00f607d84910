// A PostgreSQL store is a `CartStore`: its users get the store's API with this module.
@_exported import CartStore

import CartStore

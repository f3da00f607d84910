// Test helper: writes to a store until killed, printing the seq of every mutation that returned.
//
// usage: cartstore-crash-writer DB_PATH
// Each stdout line "<seq> <cartID> <sku>" is written only after the mutation returned, so every
// printed line is a promise the store must keep after `kill -9`.
import CartStore
import Foundation

guard CommandLine.arguments.count == 2 else {
    FileHandle.standardError.write(Data("usage: cartstore-crash-writer DB_PATH\n".utf8))
    exit(64)
}
let store = try CartStore(path: CommandLine.arguments[1])
var index = 0
while true {
    let cartID = "crash-\(index % 7)"
    let sku = "s\(index)"
    let commit = try await store.addItem(cartID: cartID, sku: sku, quantity: 1 + index % 3, unitPriceCents: index)
    FileHandle.standardOutput.write(Data("\(commit.event.seq) \(cartID) \(sku)\n".utf8))
    index += 1
    if index.isMultiple(of: 900) {
        // Keep carts under the line limit: start over on fresh skus in cleared carts.
        for cart in 0..<7 { try await store.clearCart(cartID: "crash-\(cart)") }
    }
}

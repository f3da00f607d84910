import CartStore
import Testing

/// Waits until `condition` holds, polling, or records a failure after `timeout`: the tests'
/// way to wait for something asynchronous without sleeping a guessed time.
public func eventually(
    timeout: Duration = .seconds(10), _ what: String,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async rethrows {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try? await Task.sleep(for: .milliseconds(5))
    }
    Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
}

/// `writers` concurrent tasks, each adding `perWriter` lines to its own cart `w<N>`.
public func writeConcurrently(to store: CartStore, writers: Int, perWriter: Int) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        for writer in 0..<writers {
            group.addTask {
                for index in 0..<perWriter {
                    try await store.addItem(cartID: "w\(writer)", sku: "s\(index)", quantity: 1, unitPriceCents: 1)
                }
            }
        }
        try await group.waitForAll()
    }
}

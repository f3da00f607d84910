import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import CartStore

/// A fresh directory under the system temp folder, removed by `cleanup()`.
struct TemporaryDirectory {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory
            .appending(path: "cartstore-tests-\(UUID().uuidString)", directoryHint: .isDirectory)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appending(path: name).path }

    func cleanup() { try? FileManager.default.removeItem(at: url) }
}

/// An observer that records what it is told.
final class RecordingObserver: CartStoreObserver {
    private let events = NIOLockedValueBox<[CartEvent]>([])
    let onEvent: @Sendable (CartEvent) -> Void

    init(onEvent: @escaping @Sendable (CartEvent) -> Void = { _ in }) {
        self.onEvent = onEvent
    }

    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        events.withLockedValue { $0.append(event) }
        onEvent(event)
    }

    var received: [CartEvent] { events.withLockedValue { $0 } }
    var seqs: [Int64] { received.map(\.seq) }
}

/// Reads the whole event log, page by page.
func wholeLog(_ store: CartStore) async throws -> [CartEvent] {
    var all: [CartEvent] = []
    var after: Int64 = 0
    while true {
        guard case .events(let page, _) = try await store.events(after: after, limit: 500) else {
            Issue.record("log unexpectedly too old")
            return all
        }
        all += page
        guard let last = page.last else { return all }
        after = last.seq
    }
}

/// Folds events from empty carts, as a client of the log would.
func fold(_ events: [CartEvent]) -> [Cart] {
    var carts: [String: Cart] = [:]
    for event in events {
        carts[event.cartID, default: Cart(id: event.cartID)].apply(event)
    }
    return carts.values.sorted { $0.id < $1.id }
}

extension CartStore {
    /// The SQLite engine behind a store these tests opened (every store here is one).
    var sqlite: SQLiteBackend {
        guard let engine = backend as? SQLiteBackend else { preconditionFailure("not a SQLite store") }
        return engine
    }
}

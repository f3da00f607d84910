// fanout-client-bench: what a RemoteCartStore costs per event and observer, next to the weak
// observer set alone (what CartStore's observers cost).
//
//     FANOUT_BENCHMARKS=1 swift run -c release fanout-client-bench
//
// Each run applies the same events to a replica whose observers all want every cart (the
// replica's work: check the version, apply the change to its cart, notify under its lock)
// and, for comparison, notifies the same number of observers through a bare `WeakObserverSet`
// (`CartStore.observers`' path). No network: the events are handed to the replica as the
// subscription would hand them. Numbers are only meaningful from a release build on an
// otherwise quiet machine.

import FanoutClient
import Foundation
import WeakObservers

/// Counts what it is told; one real call per delivery in both variants.
final class Counting: CartObserver, @unchecked Sendable {
    /// Deliveries here are synchronous and on one thread at a time.
    var total: Int64 = 0

    @inline(never)
    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) {
        total &+= event.seq
    }
}

struct WeakCounting: WeakObserverReference {
    weak var observer: Counting?
    init(_ observer: Counting) { self.observer = observer }
    static func identity(of observer: Counting) -> ObjectIdentifier { ObjectIdentifier(observer) }
}

func events(_ count: Int, carts: Int) -> [CartEvent] {
    var versions = [Int64](repeating: 0, count: carts)
    let date = Date(timeIntervalSince1970: 0)
    return (0..<count).map { index in
        let cart = index % carts
        versions[cart] += 1
        let item = CartItem(sku: "s\(index % 7)", quantity: 1, unitPriceCents: 10)
        return CartEvent(
            seq: Int64(index + 1), cartID: "c\(cart)", change: .itemAdded(item: item, addedQuantity: 1), version: versions[cart],
            committedAt: date)
    }
}

/// Best of five runs, nanoseconds per event per observer; `prepare` is not timed.
func best<Fixture>(
    _ deliveries: Int, prepare: () async throws -> Fixture, _ body: (Fixture) throws -> Void
) async rethrows -> Double {
    var best = Double.infinity
    for _ in 0..<5 {
        let fixture = try await prepare()
        let start = ContinuousClock.now
        try body(fixture)
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        best = min(best, seconds * 1e9 / Double(deliveries))
    }
    return best
}

/// Passed to the bare set's observers, as a store passes itself; it has no observers of its own.
let unsafeStoreForBenchmark = RemoteCartStore(server: URL(string: "http://127.0.0.1:9")!)

print("fanout-client-bench: ns per event per observer, best of 5 runs")
print("| observers | RemoteCartStore (replica) | WeakObserverSet alone (CartStore's path) | replica / set |")
print("| ---: | ---: | ---: | ---: |")
for observers in [1, 100, 10_000] {
    let count = max(2_000, 2_000_000 / observers)
    let log = events(count, carts: 50)
    let counters = (0..<observers).map { _ in Counting() }
    let replica = try await best(count * observers) {
        // Nothing listens at this address: the store's own connection attempts fail at once.
        let store = RemoteCartStore(server: URL(string: "http://127.0.0.1:9")!)
        for counter in counters { store.observers.add(counter) }
        // What the store's subscription does on a connection: plan (every cart, from a
        // snapshot: no request; untimed), then take the snapshot and each event.
        _ = try await store.replica.plan(for: store.observers, api: store.server)
        return store
    } _: { store in
        let replica = store.replica
        try replica.take(.snapshot(CartSnapshot(carts: [], seq: 0), reason: .initial), observers: store.observers)
        for event in log { try replica.take(.event(event, raw: ""), observers: store.observers) }
    }
    let set = WeakObserverSet<WeakCounting>()
    for counter in counters { set.add(counter) }
    let bare = await best(count * observers) {
        ()
    } _: { _ in
        for event in log {
            let cart = Cart(id: event.cartID, version: event.version)
            set.notify { $0.cartSource(unsafeStoreForBenchmark, didApply: event, to: cart) }
        }
    }
    print(
        "| \(observers) | \(String(format: "%.1f", replica)) | \(String(format: "%.1f", bare)) | \(String(format: "%.2f×", replica / bare)) |"
    )
    withExtendedLifetime(counters) {}
}

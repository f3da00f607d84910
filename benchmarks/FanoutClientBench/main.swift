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

// A cold start from a cache file of 1 000 carts (10 lines each): the time from creating the
// store with the file to its observer's first callback (`didLoadFromCache`, before any
// network: nothing listens at the server's address), the file made beforehand through the
// steps a subscription takes (plan, then the snapshot, which the store saves).

/// Notes when its carts came from the cache.
final class FirstLoad: CartObserver, @unchecked Sendable {
    /// Set synchronously by the store, on the thread adding the observer.
    var cartsLoaded = 0

    func cartSource(_ source: any CartSource, didLoadFromCache carts: [Cart]) {
        cartsLoaded = carts.count
    }
}

let cacheFolder = FileManager.default.temporaryDirectory.appendingPathComponent("fanout-client-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: cacheFolder, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: cacheFolder) }
let cache = cacheFolder.appendingPathComponent("replica.sqlite")
let nowhere = URL(string: "http://127.0.0.1:9")!
do {
    let maker = RemoteCartStore(server: nowhere, cacheFile: cache)
    await maker.cacheFileOpened()
    let keeper = FirstLoad()
    maker.observers.add(keeper)
    _ = try await maker.replica.plan(for: maker.observers, api: maker.server)
    let carts = (0..<1_000).map { index in
        Cart(
            id: "c\(index)", version: 10,
            items: (0..<10).map { CartItem(sku: "s\($0)", quantity: 1 + $0, unitPriceCents: 100 * $0, name: "item \($0)") })
    }
    try maker.replica.take(.snapshot(CartSnapshot(carts: carts, seq: 10_000), reason: .initial), observers: maker.observers)
    await maker.close()
    withExtendedLifetime(keeper) {}
}
// What saving to the cache file adds per event: the replica's path with one observer, with a
// cache file (each applied event is one SQLite write of its cart and the seq) and without.
for cached in [false, true] {
    let log = events(2_000, carts: 50)
    let counter = Counting()
    /// A store with one observer, planned as its subscription plans (untimed).
    func store() async throws -> RemoteCartStore {
        let file = cacheFolder.appendingPathComponent("events-\(UUID().uuidString).sqlite")
        let store = RemoteCartStore(server: nowhere, cacheFile: cached ? file : nil)
        await store.cacheFileOpened()
        store.observers.add(counter)
        _ = try await store.replica.plan(for: store.observers, api: store.server)
        return store
    }
    let perEvent = try await best(log.count, prepare: store) { store in
        try store.replica.take(.snapshot(CartSnapshot(carts: [], seq: 0), reason: .initial), observers: store.observers)
        for event in log { try store.replica.take(.event(event, raw: ""), observers: store.observers) }
    }
    // The same, until the file has every event too (its thread's work included).
    let written = try await best(log.count, prepare: store) { store in
        try store.replica.take(.snapshot(CartSnapshot(carts: [], seq: 0), reason: .initial), observers: store.observers)
        for event in log { try store.replica.take(.event(event, raw: ""), observers: store.observers) }
        let flushed = DispatchSemaphore(value: 0)
        Task {
            await store.replica.file?.flush()
            flushed.signal()
        }
        flushed.wait()
    }
    print(
        "replica with one observer, \(cached ? "with" : "without") a cache file: \(String(format: "%.0f", perEvent)) ns per event applied, "
            + "\(String(format: "%.0f", written)) ns per event written (\(String(format: "%.0f", 1e9 / written)) events/s)")
    withExtendedLifetime(counter) {}
}

// Writes through a store with a cache file (nothing listens at the server's address: each write
// stays pending, as offline): each `addItem` call's time, from the call to its return (taken,
// shown to observers, synced to the file by the file's own thread while the caller's thread is
// free), one caller at a time and 16 at once (their syncs share a transaction).
for callers in [1, 16] {
    let file = cacheFolder.appendingPathComponent("writes-\(UUID().uuidString).sqlite")
    let store = RemoteCartStore(server: nowhere, cacheFile: file)
    let perCaller = 960 / callers
    let started = ContinuousClock.now
    let times = try await withThrowingTaskGroup(of: [Double].self) { group in
        for caller in 0..<callers {
            group.addTask {
                var times: [Double] = []
                for index in 0..<perCaller {
                    let start = ContinuousClock.now
                    _ = try await store.addItem("s\(index % 50)", quantity: 1, unitPriceCents: 1, to: "w\(caller)")
                    let took = ContinuousClock.now - start
                    times.append(Double(took.components.seconds) * 1e3 + Double(took.components.attoseconds) / 1e15)
                }
                return times
            }
        }
        var all: [Double] = []
        for try await part in group { all += part }
        return all.sorted()
    }
    let total = ContinuousClock.now - started
    let seconds = Double(total.components.seconds) + Double(total.components.attoseconds) / 1e18
    print(
        "addItem with a cache file, \(callers) caller\(callers == 1 ? "" : "s"): p50 \(String(format: "%.2f", times[times.count / 2])) ms, "
            + "p99 \(String(format: "%.2f", times[times.count * 99 / 100])) ms, \(String(format: "%.0f", Double(times.count) / seconds)) writes/s"
    )
    await store.close()
}

var coldStarts: [Double] = []
var onCaller: [Double] = []
func milliseconds(_ elapsed: Duration) -> Double {
    Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1e3
}
for _ in 0..<5 {
    let start = ContinuousClock.now
    let store = RemoteCartStore(server: nowhere, cacheFile: cache)
    let first = FirstLoad()
    store.observers.add(first)
    // What the caller's thread spent: the file is opened and read on a thread of its own.
    onCaller.append(milliseconds(ContinuousClock.now - start))
    // The observer is told the cached carts as the file has been read (the store connects
    // only after): by the time `cacheFileOpened` returns.
    await store.cacheFileOpened()
    let elapsed = ContinuousClock.now - start
    guard first.cartsLoaded == 1_000 else { fatalError("the cache gave \(first.cartsLoaded) carts, not 1 000: \(store.cacheState)") }
    coldStarts.append(milliseconds(elapsed))
    await store.close()
}
print("")
print(
    "cold start from a cache file of 1 000 carts × 10 lines, store created to first callback (didLoadFromCache): "
        + "best \(String(format: "%.1f", coldStarts.min() ?? 0)) ms, median \(String(format: "%.1f", coldStarts.sorted()[2])) ms of 5; "
        + "on the caller's thread (init and add): median \(String(format: "%.2f", onCaller.sorted()[2])) ms"
)

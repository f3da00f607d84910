// cartstore-bench: what it costs to tell observers about a commit, and how many commits a
// store makes per second.
//
//     swift run -c release cartstore-bench [delivery] [mutations]   (default: both parts)
//
// Part 1 times one delivery (one event to one observer) through the store's weak
// `ObserverSet` and through the alternatives a Swift developer would reach for: a plain array
// (the floor), Foundation's `NotificationCenter` and OpenCombine's `PassthroughSubject`; plus
// a bare loop over weak references, to separate the price of `weak` from the set's own.
// Part 2 times whole mutations through `CartStore`, with and without observers attached: the
// low-level `CartStoreObserver`s, or `CartObserver`s of every cart (live: their state told).
//
// Numbers are only meaningful from a release build on an otherwise quiet machine.

import CartStore
import Foundation
import OpenCombine
import Synchronization

@main
struct CartStoreBench {
    static func main() async throws {
        // `cartstore-bench mutations` runs part 2 only (for a profiler).
        let parts = Set(CommandLine.arguments.dropFirst())
        print("cartstore-bench: \(ProcessInfo.processInfo.activeProcessorCount) cores, best of \(Timing.runs) runs")
        print()
        if parts.isEmpty || parts.contains("delivery") {
            let delivery = try DeliveryBenchmark.run()
            delivery.printReport()
            print()
        }
        guard parts.isEmpty || parts.contains("mutations") else { return }
        let mutations = try await MutationBenchmark.run()
        MutationBenchmark.printReport(mutations)
    }
}

// MARK: - The observer

/// The observer every variant delivers to, so that every variant does the same work per
/// delivery: one real (non-inlined) call that adds the event's `seq` to a field of the object.
///
/// `@inline(never)` keeps the plain-array floor honest: without it the optimiser may fuse the
/// loop and the callback into a strided add, a speed no observer mechanism can have. What we
/// compare is the machinery around the call, so every variant pays for the call itself.
final class CountingObserver: CartStoreObserver, CartObserver {
    /// Deliveries in this benchmark are synchronous, and each mutation's delivery happens-before
    /// the `await` that returns it, so the field is never touched concurrently. A lock or an
    /// atomic here would add the same constant to every variant and blur the comparison.
    nonisolated(unsafe) private(set) var total: Int64 = 0

    /// Told its state, as a `CartObserver` (on the store's catch-up task).
    let isLoaded = Atomic<Bool>(false)

    @inline(never)
    func cartStore(_ store: CartStore, didCommit event: CartEvent) {
        total &+= event.seq
    }

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        isLoaded.store(true, ordering: .releasing)
    }

    @inline(never)
    func cartSource(_ source: any CartSource, didApply event: CartEvent, to cart: Cart) {
        total &+= event.seq
    }
}

/// A bare weak reference, for the weak-loop baseline: what any set that holds its observers
/// weakly pays per delivery before it does anything of its own.
final class WeakObserver {
    weak var observer: (any CartStoreObserver)?

    init(_ observer: any CartStoreObserver) {
        self.observer = observer
    }
}

extension Notification.Name {
    static let cartStoreDidCommit = Notification.Name("CartStoreDidCommit")
}

// MARK: - Timing

enum Timing {
    /// Runs per measurement; the minimum is reported, as it is the run least disturbed by the
    /// scheduler, concurrent builds, page faults and frequency changes.
    static let runs = 5
    /// Wall time of one run: long enough to swamp clock resolution and per-run setup, short
    /// enough that the whole benchmark stays within a couple of minutes on two cores.
    static let targetSeconds = 0.25
    /// Calibration doubles the iteration count until a batch takes this long.
    static let calibrationSeconds = 0.02

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }

    static func seconds(of body: () throws -> Void) rethrows -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        try body()
        return seconds(clock.now - start)
    }
}

// MARK: - Part 1: delivery cost

/// One way of fanning an event out to `n` observers, set up and ready to deliver.
struct DeliveryFixture {
    /// Sends the event `iterations` times to every observer. The loop lives inside the fixture
    /// so that the harness adds one closure call per batch, not per event.
    var deliver: (_ iterations: Int) -> Void
    /// The observers themselves, read back at the end to prove every delivery happened.
    var observers: [CountingObserver]
    /// Whatever keeps the subscriptions alive (center, subject, cancellables, store).
    var keepAlive: Any
}

enum Mechanism: CaseIterable {
    case observerSet
    case weakArray
    case existentialArray
    case concreteArray
    case notificationCenter
    case passthroughSubject

    var label: String {
        switch self {
        case .observerSet: "ObserverSet (weak, store.observers)"
        case .weakArray: "[WeakObserver] loop (weak)"
        case .existentialArray: "[any CartStoreObserver] (strong)"
        case .concreteArray: "[CountingObserver] (strong)"
        case .notificationCenter: "NotificationCenter"
        case .passthroughSubject: "OpenCombine PassthroughSubject"
        }
    }

    /// Builds `n` fresh observers and registers them. Fresh objects per fixture matter: forming
    /// a weak reference gives an object a side table for life, which would slow the
    /// strong-array variants down if they shared observers with `ObserverSet`.
    func makeFixture(observerCount n: Int, event: CartEvent) throws -> DeliveryFixture {
        let store = try CartStore.inMemory()
        let observers = (0..<n).map { _ in CountingObserver() }
        switch self {
        case .observerSet:
            // Exactly what the store does for its `CartStoreObserver`s after each commit.
            let set = ObserverSet()
            for observer in observers { set.add(observer) }
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations {
                        set.notify { $0.cartStore(store, didCommit: event) }
                    }
                },
                observers: observers, keepAlive: store)

        case .weakArray:
            // Not one of the alternatives: the cost of Swift's `weak` itself (a load that
            // retains through the object's side table, then a release), so that the report
            // can tell the set's own overhead from the price of holding observers weakly.
            let list = observers.map(WeakObserver.init)
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations {
                        for reference in list {
                            reference.observer?.cartStore(store, didCommit: event)
                        }
                    }
                },
                observers: observers, keepAlive: store)

        case .existentialArray:
            // The realistic floor: a list of observers of different types must hold
            // existentials and dispatch through the witness table, as `ObserverSet` does. The
            // optimiser also retains and releases each element around the opaque call, so this
            // row pays two atomic reference-count operations per delivery; the concrete array
            // below is spared them.
            let list: [any CartStoreObserver] = observers
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations {
                        for observer in list { observer.cartStore(store, didCommit: event) }
                    }
                },
                observers: observers, keepAlive: store)

        case .concreteArray:
            // The absolute floor: one known class, so calls are direct.
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations {
                        for observer in observers { observer.cartStore(store, didCommit: event) }
                    }
                },
                observers: observers, keepAlive: store)

        case .notificationCenter:
            // A private center, so nothing else posts to it. The event travels as the
            // notification's object: one cast per callback, cheaper than a userInfo lookup, so
            // this is NotificationCenter at its best.
            let center = NotificationCenter()
            let tokens = observers.map { observer in
                center.addObserver(forName: .cartStoreDidCommit, object: nil, queue: nil) { note in
                    observer.cartStore(store, didCommit: note.object as! CartEvent)
                }
            }
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations {
                        center.post(name: .cartStoreDidCommit, object: event)
                    }
                },
                observers: observers, keepAlive: (center, tokens, store))

        case .passthroughSubject:
            let subject = PassthroughSubject<CartEvent, Never>()
            let cancellables = observers.map { observer in
                subject.sink { observer.cartStore(store, didCommit: $0) }
            }
            return DeliveryFixture(
                deliver: { iterations in
                    for _ in 0..<iterations { subject.send(event) }
                },
                observers: observers, keepAlive: (subject, cancellables, store))
        }
    }
}

struct DeliveryBenchmark {
    static let observerCounts = [10, 1_000, 10_000]

    /// Nanoseconds per delivery, by mechanism and observer count.
    var results: [Mechanism: [Int: Double]] = [:]
    /// Sum of every observer's total, over every fixture: printed so the work is observable.
    var checksum: Int64 = 0

    static func run() throws -> DeliveryBenchmark {
        let event = CartEvent(
            seq: 1, cartID: "bench-cart",
            change: .itemAdded(
                item: CartItem(sku: "sku-1", quantity: 1, unitPriceCents: 499, name: "Benchmark item"),
                addedQuantity: 1),
            version: 1, committedAt: Date())
        var benchmark = DeliveryBenchmark()
        for mechanism in Mechanism.allCases {
            for n in observerCounts {
                let fixture = try mechanism.makeFixture(observerCount: n, event: event)
                let (nanoseconds, delivered) = measure(fixture, observerCount: n)
                // Every observer must have seen every event exactly once: this both checks the
                // mechanism and makes the callbacks' work a visible result.
                let totals = fixture.observers.map(\.total)
                let expected = Int64(delivered) * event.seq
                guard totals.allSatisfy({ $0 == expected }) else {
                    fatalError("\(mechanism.label), \(n) observers: an observer missed or repeated events")
                }
                benchmark.checksum &+= totals.reduce(0, &+)
                benchmark.results[mechanism, default: [:]][n] = nanoseconds
            }
        }
        return benchmark
    }

    /// Returns the best ns per delivery, and how many events each observer received in all.
    static func measure(_ fixture: DeliveryFixture, observerCount n: Int) -> (Double, Int) {
        var delivered = 0
        func batch(_ iterations: Int) -> Double {
            delivered += iterations
            return Timing.seconds { fixture.deliver(iterations) }
        }
        // Warm up and calibrate together: double until a batch is long enough to time, which
        // also faults in every page and fills the caches the timed runs will use.
        var iterations = max(1, 1_000 / n)
        var elapsed = batch(iterations)
        while elapsed < Timing.calibrationSeconds {
            iterations *= 2
            elapsed = batch(iterations)
        }
        iterations = max(1, Int(Double(iterations) * Timing.targetSeconds / elapsed))
        var best = Double.infinity
        for _ in 0..<Timing.runs {
            best = min(best, batch(iterations))
        }
        return (best * 1e9 / Double(iterations * n), delivered)
    }

    /// Wide enough for every row label, mechanisms and ratios alike.
    private static let labelWidth = 42

    func printReport() {
        print("Delivery: ns per delivery (one event to one observer), synchronous, best of \(Timing.runs)")
        let header =
            pad("observers", -Self.labelWidth)
            + Self.observerCounts.map { pad(grouped($0), 10) }.joined()
        print(header)
        print(String(repeating: "-", count: header.count))
        for mechanism in Mechanism.allCases {
            let row = Self.observerCounts.map { pad(String(format: "%.2f", results[mechanism]![$0]!), 10) }
            print(pad(mechanism.label, -Self.labelWidth) + row.joined())
        }
        print()
        printRatio("ObserverSet / [any CartStoreObserver]", .observerSet, over: .existentialArray, target: "target ≤ 2×")
        printRatio("ObserverSet / [CountingObserver]", .observerSet, over: .concreteArray)
        printRatio("ObserverSet / [WeakObserver]", .observerSet, over: .weakArray, target: "the set's own overhead")
        printRatio("NotificationCenter / ObserverSet", .notificationCenter, over: .observerSet, target: "target ≥ 5×")
        printRatio("PassthroughSubject / ObserverSet", .passthroughSubject, over: .observerSet)
        print("checksum \(checksum) (every observer saw every event once)")
    }

    private func printRatio(_ label: String, _ numerator: Mechanism, over denominator: Mechanism, target: String = "") {
        let ratios = Self.observerCounts.map { n in
            pad(String(format: "%.2f×", results[numerator]![n]! / results[denominator]![n]!), 10)
        }
        print(pad(label, -Self.labelWidth) + ratios.joined() + (target.isEmpty ? "" : "   " + target))
    }
}

// MARK: - Part 2: mutations per second

enum MutationBenchmark {
    /// Timed mutations per configuration, unless `deadline` comes first (a slow disk under
    /// `.full` must not stretch the run past a couple of minutes).
    static let mutations = 2_000
    static let warmUpMutations = 200
    static let deadlineSeconds = 10.0
    static let observerCounts = [0, 1_000]

    /// Which protocol the observers follow.
    enum Kind: CaseIterable {
        /// `CartStoreObserver`: every commit, nothing more.
        case commits
        /// `CartObserver` of `.all` carts, live (told its state before the timing).
        case carts

        var label: String {
            switch self {
            case .commits: "CartStoreObserver"
            case .carts: "CartObserver .all"
            }
        }
    }

    enum Backing: CaseIterable {
        case fileFull, fileNormal, inMemory

        var label: String {
            switch self {
            case .fileFull: "file, durability .full"
            case .fileNormal: "file, durability .normal"
            case .inMemory: "inMemory()"
            }
        }
    }

    struct Result {
        var backing: Backing
        var kind: Kind
        var observers: Int
        var mutations: Int
        var seconds: Double
        /// User + system CPU of the whole process over the timed mutations: the caller, the
        /// store's writer thread and the kernel's share (the WAL writes and syncs).
        var cpuSeconds: Double
    }

    /// User + system CPU of this process so far.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    static func run() async throws -> [Result] {
        var results: [Result] = []
        for backing in Backing.allCases {
            for n in observerCounts {
                for kind in Kind.allCases where n > 0 || kind == .commits {
                    results.append(try await measure(backing, kind, observerCount: n))
                }
            }
        }
        return results
    }

    static func measure(_ backing: Backing, _ kind: Kind, observerCount n: Int) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("cartstore-bench-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("carts.sqlite").path

        let store: CartStore =
            switch backing {
            case .fileFull: try CartStore(path: path, durability: .full)
            case .fileNormal: try CartStore(path: path, durability: .normal)
            case .inMemory: try CartStore.inMemory()
            }
        let observers = (0..<n).map { _ in CountingObserver() }
        switch kind {
        case .commits:
            for observer in observers { store.observers.add(observer as any CartStoreObserver) }
        case .carts:
            // Told their (empty) state before any write, so each then counts every event.
            for observer in observers { store.observers.add(observer as any CartObserver, carts: .all) }
            while !observers.allSatisfy({ $0.isLoaded.load(ordering: .acquiring) }) {
                try await Task.sleep(for: .milliseconds(10))
            }
        }

        var seqSum: Int64 = 0
        var index = 0
        // Spread writes over 100 carts of at most 50 lines: the store reads the whole cart on
        // every write, so carts must stay the same size for the rate to be steady, and far from
        // the 1 000-line and 10 000-quantity limits however long the run.
        func mutate() async throws {
            let commit = try await store.addItem(
                cartID: "cart-\(index % 100)", sku: "sku-\(index / 100 % 50)",
                quantity: 1, unitPriceCents: 100 + index % 900)
            seqSum &+= commit.event.seq
            index += 1
        }

        for _ in 0..<warmUpMutations { try await mutate() }
        let clock = ContinuousClock()
        let cpuBefore = processCPUSeconds()
        let start = clock.now
        let deadline = start + .seconds(deadlineSeconds)
        var timed = 0
        while timed < mutations && clock.now < deadline {
            try await mutate()
            timed += 1
        }
        let seconds = Timing.seconds(clock.now - start)
        let cpuSeconds = processCPUSeconds() - cpuBefore
        try store.close()

        guard observers.allSatisfy({ $0.total == seqSum }) else {
            fatalError("\(backing.label), \(n) observers: an observer missed or repeated events")
        }
        return Result(backing: backing, kind: kind, observers: n, mutations: timed, seconds: seconds, cpuSeconds: cpuSeconds)
    }

    static func printReport(_ results: [Result]) {
        print("Mutations: sequential `try await store.addItem(...)`, one event each, synchronous observers")
        let header =
            pad("store", -26) + pad("observers", -20) + pad("", 6) + pad("mutations", 11)
            + pad("mutations/s", 13) + pad("µs/mutation", 13) + pad("CPU µs/mutation", 17)
        print(header)
        print(String(repeating: "-", count: header.count))
        for result in results {
            let rate = Double(result.mutations) / result.seconds
            print(
                pad(result.backing.label, -26) + pad(result.observers == 0 ? "none" : result.kind.label, -20)
                    + pad(result.observers == 0 ? "" : grouped(result.observers), 6)
                    + pad(grouped(result.mutations), 11) + pad(grouped(Int(rate.rounded())), 13)
                    + pad(String(format: "%.1f", 1e6 / rate), 13)
                    + pad(String(format: "%.1f", result.cpuSeconds * 1e6 / Double(result.mutations)), 17))
        }
    }
}

// MARK: - Formatting

/// Pads to `width` characters: right-aligned for a positive width, left-aligned for negative.
func pad(_ text: String, _ width: Int) -> String {
    let fill = String(repeating: " ", count: max(0, abs(width) - text.count))
    return width < 0 ? text + fill : fill + text
}

/// `10000` as `10 000`, the way the report names observer counts.
func grouped(_ value: Int) -> String {
    var digits = String(value)
    var groups: [Substring] = []
    while digits.count > 3 {
        groups.insert(Substring(digits.suffix(3)), at: 0)
        digits.removeLast(3)
    }
    groups.insert(Substring(digits), at: 0)
    return groups.joined(separator: " ")
}

// A test helper: the lifetime rules of `RemoteCartStore` checked in whatever build this is.
// EndToEndTests runs it against a real server, and ./scripts/test-release runs it again built
// with optimisations, which may end an object's life at its last use.
//
// Usage: remote-store-probe http://127.0.0.1:PORT — exits 0 when every check holds, else 1
// with what failed on stderr.
import FanoutClient
import FanoutProtocol
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

final class Counter: CartObserver {
    let loads = Atomic<Int>(0)
    let events = Atomic<Int>(0)
    /// Removes itself from `store` on this event, when set.
    let removeAt: Int?

    init(removeAt: Int? = nil) {
        self.removeAt = removeAt
    }

    func cartSource(_ store: any CartSource, didLoad carts: [Cart]) {
        loads.add(1, ordering: .relaxed)
    }

    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) {
        let count = events.add(1, ordering: .relaxed).newValue
        if count == removeAt { store.observers.remove(self) }
    }
}

/// Events seen by observers that are gone: must stay 0.
let afterRelease = Atomic<Int>(0)

final class Released: CartObserver {
    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) {
        afterRelease.add(1, ordering: .relaxed)
    }
}

/// A view model on the main actor.
@MainActor
final class MainActorCounter: MainActorCartObserver {
    var loads = 0
    var events = 0
    var states: [RemoteCartStore.ConnectionState] = []

    func cartSource(_ store: any CartSource, didLoad carts: [Cart]) { loads += 1 }
    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) { events += 1 }
    func cartSource(_ store: any CartSource, connectionDidChange state: CartConnectionState) { states.append(state) }
}

@MainActor
final class ReleasedOnMainActor: MainActorCartObserver {
    /// Events told to main-actor observers that are gone: must stay 0.
    static var afterRelease = 0

    func cartSource(_ store: any CartSource, didApply event: CartEvent, to cart: Cart) { Self.afterRelease += 1 }
}

/// Adds a main-actor observer that nothing but the store refers to once this returns.
@MainActor
func addReleasedOnMainActor(to store: RemoteCartStore) {
    store.observers.add(ReleasedOnMainActor(), carts: .only(["probe"]))
}

struct ProbeFailure: Error, CustomStringConvertible {
    let description: String
}

@MainActor
func waitFor(_ what: String, timeout: Duration = .seconds(15), _ condition: () async -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    throw ProbeFailure(description: "timed out waiting for \(what)")
}

func subscribers(_ server: URL) async -> Int? {
    guard let (data, _) = try? await URLSession.shared.data(from: server.appending(path: "stats")),
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    else { return nil }
    return (object["subscribers"] as? NSNumber)?.intValue
}

/// Adds an observer that nothing but the store refers to once this returns.
func addReleased(to store: RemoteCartStore) {
    store.observers.add(Released(), carts: .only(["probe"]))
}

@MainActor
func run(_ server: URL) async throws {
    let api = CartServerAPI(baseURL: server)
    _ = try await api.addItem("seed", quantity: 1, unitPriceCents: 1, to: "probe")
    let store = RemoteCartStore(server: server, releaseCheckInterval: .milliseconds(200))

    // 1. A released observer gets nothing, and its release closes the connection.
    do {
        let held = Counter()
        store.observers.add(held, carts: .only(["probe"]))
        addReleased(to: store)
        try await waitFor("the first observer's state") { held.loads.load(ordering: .relaxed) == 1 }
        try await waitFor("the server's subscriber") { await subscribers(server) == 1 }
        for index in 0..<5 { _ = try await api.addItem("s\(index)", quantity: 1, unitPriceCents: 1, to: "probe") }
        try await waitFor("the held observer's events") { held.events.load(ordering: .relaxed) == 5 }
        guard afterRelease.load(ordering: .relaxed) == 0 else {
            throw ProbeFailure(description: "a released observer got \(afterRelease.load(ordering: .relaxed)) events")
        }
        withExtendedLifetime(held) {}
    }
    try await waitFor("the subscriber to leave once its last observer was released") { await subscribers(server) == 0 }

    // 2. An observer that removes itself in a callback gets nothing after.
    do {
        let remover = Counter(removeAt: 2)
        store.observers.add(remover, carts: .only(["probe"]))
        let witness = Counter()
        store.observers.add(witness, carts: .only(["probe"]))
        try await waitFor("the state") { remover.loads.load(ordering: .relaxed) == 1 && witness.loads.load(ordering: .relaxed) == 1 }
        for index in 0..<5 { _ = try await api.addItem("r\(index)", quantity: 1, unitPriceCents: 1, to: "probe") }
        try await waitFor("the witness's events") { witness.events.load(ordering: .relaxed) == 5 }
        guard remover.events.load(ordering: .relaxed) == 2 else {
            throw ProbeFailure(description: "an observer removed in its 2nd callback got \(remover.events.load(ordering: .relaxed))")
        }
        withExtendedLifetime(remover) {}
        withExtendedLifetime(witness) {}
    }
    try await waitFor("the subscriber to leave") { await subscribers(server) == 0 }

    // 3. An `updates` loop that ends lets its observer go.
    var seen = 0
    for await update in store.updates(of: .only(["probe"])) {
        if case .loaded = update { seen += 1 }
        if seen == 1 { break }
    }
    try await waitFor("the subscriber to leave after the loop ended") { await subscribers(server) == 0 }

    // 4. Main-actor observers: called on the main actor; a released one gets nothing, and the
    // release of the last closes the connection.
    try await mainActorObservers(store, api: api, server: server)

    // 5. close(): every observer told, the connection closed, nothing after.
    let last = Counter()
    store.observers.add(last, carts: .only(["probe"]))
    let viewModel = MainActorCounter()
    store.observers.add(viewModel, carts: .only(["probe"]))
    try await waitFor("the state") { viewModel.loads == 1 && last.loads.load(ordering: .relaxed) == 1 }
    await store.close()
    try await waitFor("the subscriber to leave at close") { await subscribers(server) == 0 }
    try await waitFor("the view model told it is closed") { viewModel.states.last == .closed }
    _ = try await api.addItem("after-close", quantity: 1, unitPriceCents: 1, to: "probe")
    let witness = RemoteCartStore(server: server)
    let witnessObserver = Counter()
    witness.observers.add(witnessObserver, carts: .only(["probe"]))
    try await waitFor("a witness's state, after the write") { witnessObserver.loads.load(ordering: .relaxed) == 1 }
    await witness.close()
    guard viewModel.events == 0, last.events.load(ordering: .relaxed) == 0 else {
        throw ProbeFailure(description: "a closed store told an observer of a later event")
    }
    withExtendedLifetime(last) {}
    print("remote-store-probe: every check held")
}

@MainActor
func mainActorObservers(_ store: RemoteCartStore, api: CartServerAPI, server: URL) async throws {
    do {
        let model = MainActorCounter()
        store.observers.add(model, carts: .only(["probe"]))
        addReleasedOnMainActor(to: store)
        try await waitFor("the view model's state") { model.loads == 1 }
        try await waitFor("the server's subscriber") { await subscribers(server) == 1 }
        for index in 0..<3 { _ = try await api.addItem("m\(index)", quantity: 1, unitPriceCents: 1, to: "probe") }
        try await waitFor("the view model's events") { model.events == 3 }
        guard ReleasedOnMainActor.afterRelease == 0 else {
            throw ProbeFailure(description: "a released main-actor observer got \(ReleasedOnMainActor.afterRelease) events")
        }
        withExtendedLifetime(model) {}
    }
    try await waitFor("the subscriber to leave once the view model was released") { await subscribers(server) == 0 }
}

/// `--refusal URL TOKEN`: a store whose token may see cart `a` only keeps serving `a` when an
/// observer asks for `b` (refused to that observer alone), and says so with typed values.
@MainActor
func refusal(_ server: URL, token: String) async throws {
    let store = RemoteCartStore(server: server, credentials: .token(token))
    let mine = MainActorCounter()
    store.observers.add(mine, carts: .only(["a"]))
    try await waitFor("a's state") { mine.loads == 1 }
    let theirs = RefusalCounter()
    store.observers.add(theirs, carts: .only(["b"]))
    try await waitFor("b refused to its observer") { theirs.refusals == [["b"]] && theirs.codes == [.forbiddenCart] }
    _ = try await store.server.addItem("after-refusal", quantity: 1, unitPriceCents: 1, to: "a")
    try await waitFor("a's event after the refusal") { mine.events == 1 }
    guard store.connectionState == .live, theirs.loads == 0, !mine.states.contains(where: { if case .refused = $0 { true } else { false } })
    else {
        throw ProbeFailure(
            description: "after a refusal of b: \(store.connectionState), b loaded \(theirs.loads) times, a's states \(mine.states)")
    }
    withExtendedLifetime(theirs) {}
    await store.close()
    print("remote-store-probe: every refusal check held")
}

@MainActor
final class RefusalCounter: MainActorCartObserver {
    var loads = 0
    var refusals: [[String]] = []
    var codes: [FanoutErrorCode?] = []

    func cartSource(_ store: any CartSource, didLoad carts: [Cart]) { loads += 1 }
    func cartSource(_ store: any CartSource, didRefuse carts: [String], because error: RemoteStoreError) {
        refusals.append(carts)
        codes.append(error.code)
    }
}

/// Write `index` of an offline run: over 20 carts `o0`…`o19`, as the tests expect them.
func offlineWrite(_ index: Int) -> (cartID: String, write: CartWrite) {
    ("o\(index % 20)", .addItem(sku: "s\(index / 20)", quantity: 1 + index % 3, unitPriceCents: 10, name: nil))
}

/// `--offline-writes URL CACHE FROM TO [KILL_AFTER]`: an app's writes FROM..<TO through a store
/// kept in CACHE. With KILL_AFTER, the process kills itself (SIGKILL) once it has taken that
/// many; without, it waits until the server has confirmed every pending write (the cache's
/// too) and exits 0, or 1 if one was refused or they are not confirmed within 60 s.
func offlineWrites(_ server: URL, cache: URL, range: Range<Int>, killAfter: Int?) async throws {
    let store = RemoteCartStore(server: server, cacheFile: cache)
    var restored = 0
    if case .restored(_, _, let pending) = await store.cacheFileOpened() { restored = pending }
    var taken: [PendingWrite] = []
    for index in range {
        let (cartID, write) = offlineWrite(index)
        taken.append(try await store.write(write, to: cartID))
        if taken.count == killAfter { kill(getpid(), SIGKILL) }
    }
    try await waitFor("every write confirmed", timeout: .seconds(60)) { store.pendingWrites.isEmpty }
    for write in taken {
        guard case .confirmed = await store.outcome(of: write) else { throw ProbeFailure(description: "\(write.id) was not confirmed") }
    }
    await store.close()
    print("remote-store-probe: \(restored) restored and \(taken.count) taken, every one confirmed")
}

let arguments = CommandLine.arguments
do {
    if arguments.count == 4, arguments[1] == "--refusal", let server = URL(string: arguments[2]) {
        try await refusal(server, token: arguments[3])
    } else if (6...7).contains(arguments.count), arguments[1] == "--offline-writes", let server = URL(string: arguments[2]),
        let from = Int(arguments[4]), let to = Int(arguments[5]), from <= to
    {
        try await offlineWrites(
            server, cache: URL(fileURLWithPath: arguments[3]), range: from..<to, killAfter: arguments.count == 7 ? Int(arguments[6]) : nil)
    } else if arguments.count == 2, let server = URL(string: arguments[1]) {
        try await run(server)
    } else {
        FileHandle.standardError.write(
            Data(
                "usage: remote-store-probe http://HOST:PORT | --refusal http://HOST:PORT TOKEN | --offline-writes http://HOST:PORT CACHE FROM TO [KILL_AFTER]\n"
                    .utf8))
        exit(2)
    }
} catch {
    FileHandle.standardError.write(Data("remote-store-probe: \(error)\n".utf8))
    exit(1)
}

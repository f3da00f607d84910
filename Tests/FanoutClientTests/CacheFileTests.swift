import FanoutClient
import FanoutTestSupport
import Foundation
import GRDB
import NIOConcurrencyHelpers
import Testing

/// A `RemoteCartStore` that keeps its replica in a file: a cold start shows the carts before any
/// network and resumes after their seq; writes taken offline survive the app and reach the
/// server once; a file that cannot be trusted is started anew with the reason.
@Suite("Cache file", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct CacheFileTests {
    /// A cache file path in a fresh folder, and its removal.
    static func cacheFile() throws -> (URL, @Sendable () -> Void) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("fanout-cache-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return (folder.appendingPathComponent("replica.sqlite"), { try? FileManager.default.removeItem(at: folder) })
    }

    /// What an earlier run of the app leaves: a store of `server` that follows `cart` until it
    /// has loaded it, then closes, so that `file` holds the cart and its seq.
    static func fillCache(_ file: URL, of server: ServerUnderTest, cart: String, transport: FanoutSubscription.Transport = .webSocket)
        async
    {
        let first = RemoteCartStore(server: server.url, transport: transport, cacheFile: file)
        let before = Recorder()
        first.observers.add(before, carts: .only([cart]))
        await eventually("loaded", store: first, server: server) { before.isLoaded }
        await first.close()
        withExtendedLifetime(before) {}
    }

    @Test func aColdStartShowsTheCachedCartsBeforeAnyNetworkThenResumesAfterTheirSeq() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest(kind: .process)
        await server.add("c", "seed")
        let first = RemoteCartStore(server: server.url, cacheFile: file)
        #expect(await first.cacheFileOpened() == .empty)
        let before = Recorder()
        first.observers.add(before, carts: .only(["c"]))
        await eventually("loaded") { before.isLoaded }
        let api = CartServerAPI(baseURL: server.url)
        _ = try await api.addItem("pear", quantity: 2, unitPriceCents: 30, to: "c")
        await eventually("applied") { first.cart("c")?.version == 2 }
        let cached = try #require(first.cart("c"))
        await first.close()

        // The server cannot answer: what the next store shows comes from the file alone.
        server.freeze()
        let second = RemoteCartStore(server: server.url, cacheFile: file)
        guard case .restored(let seq, _, 0) = await second.cacheFileOpened() else {
            Issue.record("not restored: \(second.cacheState)")
            return
        }
        let after = Recorder()
        second.observers.add(after, carts: .only(["c"]))
        await eventually("the cached cart") { after.isLoaded }
        #expect(after.record.withLockedValue { $0.loaded } == [cached], "the cached cart, told before any network")
        #expect(second.isFromCache && second.cart("c") == cached && second.seq == seq)

        server.thaw()
        _ = try await api.addItem("fig", quantity: 1, unitPriceCents: 5, to: "c")
        await eventually(timeout: .seconds(30), "live, and the write since applied") { second.cart("c")?.version == 3 }
        #expect(!second.isFromCache && second.connectionState == .live)
        #expect(after.events.map(\.version) == [3], "only the event after the cached seq")
        #expect(after.record.withLockedValue { $0.resyncs.isEmpty && $0.loads == 1 })
        #expect(second.cart("c") == (try await server.carts())["c"])
        withExtendedLifetime((before, after)) {}
        await second.close()
        await server.stop()
    }

    /// The cold start of every app, in each order of its steps: the store restored from its
    /// file, its loop's first plan (nothing observed yet: it waits), then the first observer; or
    /// the observer first. Either way the observer opens the connection: live, counted by the
    /// server, its writes confirmed, the server's changes arriving. Before the store consulted
    /// `SubscriptionDemand`, the first order stayed `idle` for good: the restored carts counted
    /// as followed, so no plan was asked for.
    @Test(arguments: FanoutSubscription.Transport.allCases, [false, true])
    func aStoreRestoredFromItsFileGoesLiveWhateverTheOrderOfItsFirstObserver(
        transport: FanoutSubscription.Transport, observerFirst: Bool
    ) async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest()
        await server.add("c", "seed")
        await Self.fillCache(file, of: server, cart: "c", transport: transport)

        let second = RemoteCartStore(server: server.url, transport: transport, cacheFile: file)
        let after = Recorder()
        if observerFirst {
            second.observers.add(after, carts: .only(["c"]))
        } else {
            // Held in this order: the loop has planned and waits, with nothing observed.
            await eventually("the loop waits", store: second, server: server) { second.replica.loopState == .idle }
        }
        #expect(second.isFromCache || observerFirst)
        if !observerFirst { second.observers.add(after, carts: .only(["c"])) }
        await eventually("loaded", store: second, server: server) { after.isLoaded }
        #expect(after.record.withLockedValue { $0.loaded?.first?.items.map(\.sku) } == ["seed"], "the cached cart")
        await eventually("live", store: second, server: server) { second.connectionState == .live }
        #expect(await server.subscribers() == 1)
        let write = try await second.addItem("pear", quantity: 1, unitPriceCents: 5, to: "c")
        let confirmed = await eventually("the write confirmed", store: second, server: server) { second.pendingWrites.isEmpty }
        guard confirmed, case .confirmed(let seq) = await second.outcome(of: write) else {
            Issue.record("the write was not confirmed")
            await second.close()
            return await server.stop()
        }
        let fromServer = try #require(await server.add("c", "fig"))
        await eventually("the server's change", store: second, server: server) { second.seq == fromServer }
        #expect(after.events.map(\.seq) == [seq, fromServer], "each change once, after the cached seq")
        #expect(second.cart("c") == (try await server.carts())["c"])
        withExtendedLifetime(after) {}
        await second.close()
        await server.stop()
    }

    /// The same orders without a cache file: the observer opens the connection whether the
    /// store's loop planned before it came or not.
    @Test(arguments: FanoutSubscription.Transport.allCases, [false, true])
    func aStoreWithoutAFileGoesLiveWhateverTheOrderOfItsFirstObserver(
        transport: FanoutSubscription.Transport, observerFirst: Bool
    ) async throws {
        let server = try await ServerUnderTest()
        await server.add("c", "seed")
        let store = RemoteCartStore(server: server.url, transport: transport)
        let recorder = Recorder()
        if !observerFirst {
            await eventually("the loop waits", store: store, server: server) { store.replica.loopState == .idle }
        }
        store.observers.add(recorder, carts: .only(["c"]))
        await eventually("loaded", store: store, server: server) { recorder.isLoaded }
        await eventually("live", store: store, server: server) { store.connectionState == .live }
        #expect(await server.subscribers() == 1)
        let fromServer = try #require(await server.add("c", "fig"))
        await eventually("the server's change", store: store, server: server) { store.seq == fromServer }
        #expect(recorder.events.map(\.seq) == [fromServer])
        withExtendedLifetime(recorder) {}
        await store.close()
        await server.stop()
    }

    /// A cache file another connection holds (the app's previous store, released and still
    /// closing) is waited for, off the caller's thread, and never removed: under load the next
    /// store once found it
    /// "locked", took it for a broken file, and removed it with its pending writes.
    @Test func aCacheFileInUseIsWaitedForAndNeverRemoved() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let nowhere = URL(string: "http://127.0.0.1:1")!
        var first: RemoteCartStore? = RemoteCartStore(server: nowhere, cacheFile: file)
        let made = try await #require(first).addItem("s", quantity: 1, unitPriceCents: 1, to: "c")
        await first?.close()
        first = nil
        // Held: one connection with the file to itself (no other may read it) for 300 ms, once
        // the first store has let it go.
        var waiting = Configuration()
        waiting.busyMode = .timeout(30)
        let holder = try DatabaseQueue(path: file.path, configuration: waiting)
        try holder.inDatabase { db in
            try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE")
            try db.execute(sql: "BEGIN EXCLUSIVE")
            try db.execute(sql: "COMMIT")
        }
        let second = RemoteCartStore(server: nowhere, cacheFile: file)
        #expect(second.cacheState == .opening, "made without waiting for the file")
        // A write made meanwhile waits for the file: it goes after the one the file holds.
        let writing = Task { try await second.addItem("t", quantity: 1, unitPriceCents: 1, to: "c") }
        #expect(second.pendingWrites.isEmpty, "nothing is taken before the file is read")
        try holder.close()
        guard case .restored(_, _, 1) = await second.cacheFileOpened() else {
            Issue.record("the pending write was not restored: \(second.cacheState)")
            return
        }
        let later = try await writing.value
        #expect(second.pendingWrites.map(\.id) == [made.id, later.id], "the file's write first, then the one made while it was read")
        await second.close()
    }

    /// A write made on the main actor is shown at once and saved by the file's own thread: with
    /// the file held by another connection (a disk that does not answer), the main actor goes on
    /// (it sees the write pending) while the write's call waits; once the file answers, the call
    /// returns and the write is in the file. (It was saved on the caller's thread: the main
    /// thread waited on the disk, ~5 ms a write, up to the file's 5 s busy wait.)
    @Test func theMainActorNeverWaitsForTheFile() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let nowhere = URL(string: "http://127.0.0.1:1")!
        let store = RemoteCartStore(server: nowhere, cacheFile: file)
        await store.cacheFileOpened()
        // Another connection holding the file's write lock: a transaction left open on purpose.
        var holding = Configuration()
        holding.allowsUnsafeTransactions = true
        let holder = try DatabaseQueue(path: file.path, configuration: holding)
        try holder.inDatabase { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        let returned = NIOLockedValueBox(false)
        let writing = Task { @MainActor in
            let write = try await store.addItem("s", quantity: 1, unitPriceCents: 1, to: "c")
            returned.withLockedValue { $0 = true }
            return write
        }
        // The main actor runs while the write's call, made on it, waits for the file.
        await eventually("the write taken and shown, on the main actor") { await MainActor.run { store.pendingWrites.count == 1 } }
        #expect(!returned.withLockedValue { $0 }, "the call waits until the write is saved")
        try holder.inDatabase { db in try db.execute(sql: "COMMIT") }
        let write = try await writing.value
        #expect(returned.withLockedValue { $0 })
        await store.close()
        let reopened = RemoteCartStore(server: nowhere, cacheFile: file)
        await reopened.cacheFileOpened()
        #expect(reopened.pendingWrites.map(\.id) == [write.id], "saved by the time the call returned")
        await reopened.close()
    }

    @Test func writesTakenOfflineSurviveTheAppAndReachTheServerOnceInOrder() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest(kind: .process)
        let carts = (0..<20).map { "o\($0)" }
        // Frozen: the first write of the first run is sent, and committed only after that run
        // has gone: its answer never reaches it. The next run sends it again, with its key.
        server.freeze()
        var first: RemoteCartStore? = RemoteCartStore(server: server.url, cacheFile: file)
        var made: [PendingWrite] = []
        for index in 0..<100 {
            made.append(
                try await #require(first).addItem("s\(index / 20)", quantity: 1 + index % 3, unitPriceCents: 10, to: carts[index % 20]))
        }
        first = nil  // the app is gone, with its writes pending in the file

        let second = RemoteCartStore(server: server.url, cacheFile: file)
        guard case .restored(_, _, 100) = await second.cacheFileOpened() else {
            Issue.record("the pending writes were not restored: \(second.cacheState)")
            return
        }
        #expect(second.pendingWrites.map(\.id) == made.map(\.id), "every write taken, in order, with its key")
        #expect(second.pendingWrites.map(\.write) == made.map(\.write))
        for index in 100..<200 {
            made.append(try await second.addItem("s\(index / 20)", quantity: 1 + index % 3, unitPriceCents: 10, to: carts[index % 20]))
        }
        server.thaw()
        await eventually(timeout: .seconds(60), "every write confirmed") { second.pendingWrites.isEmpty }
        for write in made {
            guard case .confirmed = await second.outcome(of: write) else {
                Issue.record("\(write.id) was not confirmed")
                continue
            }
        }
        let log = try await server.log()
        #expect(log.count == 200, "each write once: \(log.count) events")
        #expect(Set(log.compactMap(\.idempotencyKey)) == Set(made.map(\.id)), "each event carries its write's key")
        let remote = try await server.carts()
        for cart in carts {
            let expected = Cart(id: cart).applying(made.filter { $0.cartID == cart })
            #expect(remote[cart]?.items == expected.items, "\(cart): the writes applied once, in the order made")
        }
        await second.close()
        await server.stop()
    }

    /// A server now on another database whose log is longer than the cache's seq: `since` alone
    /// would resume it and mix two databases; the welcome's database identity says it is not.
    @Test func aCacheOfAnotherDatabaseIsReplacedWithTheReason() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest()
        await server.add("c", "first")
        await Self.fillCache(file, of: server, cart: "c")

        let (other, removeOther) = try Mutations.temporaryDatabase()
        defer { removeOther() }
        try await server.restart(database: other)
        for sku in ["x", "y", "z"] { await server.add("c", sku) }
        let second = RemoteCartStore(server: server.url, cacheFile: file)
        let after = Recorder()
        second.observers.add(after, carts: .only(["c"]))
        await eventually("loaded") { after.isLoaded }
        #expect(after.record.withLockedValue { $0.loaded?.first?.items.map(\.sku) } == ["first"], "the cache, first")
        await eventually(timeout: .seconds(30), "replaced by the other database's cart") {
            after.record.withLockedValue { $0.resyncs.count } == 1
        }
        let resync = try #require(after.record.withLockedValue { $0.resyncs.first })
        #expect(resync.0 == .otherDatabase)
        #expect(resync.1.first?.items.map(\.sku) == ["x", "y", "z"], "nothing of the first database's cart")
        #expect(after.events.isEmpty, "no event of the other database applied on top of the cache")
        #expect(second.cart("c") == (try await server.carts())["c"])
        withExtendedLifetime(after) {}
        await second.close()
        await server.stop()
    }

    /// The server pruned its log past the cache's seq while the app was away: the cached carts
    /// are shown, then replaced by the server's with the reason, never resumed over a gap.
    @Test func aCacheOlderThanThePrunedLogIsReplacedWithTheReason() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest(["--ring-size", "16"])
        await server.add("a", "seed")
        await Self.fillCache(file, of: server, cart: "a")

        try await server.pruneWhileDown("a", writing: 40, keeping: 5)

        let second = RemoteCartStore(server: server.url, cacheFile: file)
        let after = Recorder()
        second.observers.add(after, carts: .only(["a"]))
        await eventually("loaded") { after.isLoaded }
        #expect(after.record.withLockedValue { $0.loaded?.first?.version } == 1, "the cached cart first")
        await eventually(timeout: .seconds(30), "resynced") { !after.record.withLockedValue { $0.resyncs.isEmpty } }
        let resync = after.record.withLockedValue { $0.resyncs.first }
        #expect(resync?.0 == .historyPruned)
        #expect(resync?.1.first?.version == 41)
        #expect(after.events.isEmpty, "nothing applied over the gap")
        #expect(second.cart("a") == (try await server.carts())["a"])
        withExtendedLifetime(after) {}
        await second.close()
        await server.stop()
    }

    @Test func aFileThatCannotBeTrustedIsStartedAnewWithTheReason() async throws {
        let (file, removeFile) = try Self.cacheFile()
        defer { removeFile() }
        let server = try await ServerUnderTest()
        await server.add("d", "seed")

        try Data("not a database, or half of one".utf8).write(to: file)
        let fromGarbage = RemoteCartStore(server: server.url, cacheFile: file)
        guard case .discarded(.unreadable) = await fromGarbage.cacheFileOpened() else {
            Issue.record("a damaged file was not discarded: \(fromGarbage.cacheState)")
            return
        }
        let recorder = Recorder()
        fromGarbage.observers.add(recorder, carts: .only(["d"]))
        await eventually("loaded from the server") { recorder.isLoaded }
        #expect(recorder.record.withLockedValue { $0.loaded?.first?.items.map(\.sku) } == ["seed"])
        await eventually("saved") { (try? Data(contentsOf: file).count) ?? 0 > 0 }
        await fromGarbage.close()

        let elsewhere = RemoteCartStore(server: URL(string: "http://127.0.0.1:1")!, cacheFile: file)
        #expect(await elsewhere.cacheFileOpened() == .discarded(.otherServer(server.url.absoluteString)), "another server's file")
        #expect(elsewhere.cart("d") == nil, "nothing of the other server's carts")
        await elsewhere.close()

        // Truncated in the middle of its pages: read anew, never a crash.
        let again = RemoteCartStore(server: server.url, cacheFile: file)
        await again.close()
        let whole = try Data(contentsOf: file)
        try whole.prefix(whole.count / 2).write(to: file)
        let truncated = RemoteCartStore(server: server.url, cacheFile: file)
        switch await truncated.cacheFileOpened() {
        case .discarded, .empty: break
        default: Issue.record("a truncated file was trusted: \(truncated.cacheState)")
        }
        await truncated.close()
        withExtendedLifetime(recorder) {}
        await server.stop()
    }
}

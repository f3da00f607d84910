import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import NIOConcurrencyHelpers
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Presence through `RemoteCartStore`, against real `fanout-server` processes: who else is
/// looking at a cart, as an app's observer sees it.
@Suite("Remote cart store presence", .tags(.processes), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)))
struct RemotePresenceTests {
    /// Two users' stores on one cart: each sees the other join, change state, and leave when
    /// its observer is released.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func twoUsersSeeEachOtherJoinChangeStateAndLeave(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(["--jwt-secret", RemoteStoreTokenTests.secret], leaseTTL: 10)
        let annToken = try await RemoteStoreTokenTests.mint(["--sub", "ann", "--carts", "shared", "--scope", "read", "--ttl", "1h"])
        let bobToken = try await RemoteStoreTokenTests.mint(["--sub", "bob", "--carts", "shared", "--scope", "read", "--ttl", "1h"])
        let annStore = RemoteCartStore(
            server: server.url, transport: transport, credentials: .token(annToken), presence: .init(state: ["editing": false]))
        let ann = PresenceRecorder()
        annStore.observers.add(ann, carts: .only(["shared"]))
        await eventually("ann sees herself") { ann.member("ann", of: "shared") != nil }
        #expect(ann.member("ann", of: "shared")?.member == annStore.presenceKey)

        let bobStore = RemoteCartStore(server: server.url, transport: transport, credentials: .token(bobToken), presence: .init())
        var bob: PresenceRecorder? = PresenceRecorder()
        bobStore.observers.add(bob!, carts: .only(["shared"]))
        await eventually("ann sees bob join") { ann.joined("bob") }
        await eventually("bob sees ann and himself") { Set(bob!.members(of: "shared").compactMap(\.user)) == ["ann", "bob"] }
        #expect(bob!.member("ann", of: "shared")?.state == ["editing": false])
        #expect(bobStore.presence(of: "shared")?.count == 2)

        try bobStore.setPresenceState(["editing": true, "line": "apple"])
        #expect(bobStore.presenceState == ["editing": true, "line": "apple"])
        await eventually("ann sees bob's state") { ann.member("bob", of: "shared")?.state == ["editing": true, "line": "apple"] }
        await eventually("bob hears his own change back") { bob!.member("bob", of: "shared")?.state["editing"] == true }
        #expect(ann.updated("bob"), "a state change is an update: \(ann.changes)")
        #expect(!ann.left("bob"), "a state change is no leave and join, on an event stream too: \(ann.changes)")
        #expect(ann.changes.filter { $0.change.joinedUser == "bob" }.count == 1)

        // Released, bob's store closes its connection at its next release check (that check's
        // timing is tested on an injected clock in RemoteCartStoreTests): ann sees a leave as
        // closed, not one at the lease's end.
        bob = nil
        await eventually("ann sees bob leave") { ann.left("bob") }
        let leave = try #require(ann.changes.first { $0.change.leftUser == "bob" })
        #expect(leave.change.leaveReason == .closed)
        #expect(ann.members(of: "shared").compactMap(\.user) == ["ann"])
        withExtendedLifetime(bobStore) {}
        await annStore.close()
        await server.stop()
    }

    /// Many quick state changes (more than the server takes in a second, and on an event stream
    /// each one a new stream): the others end on the last one, and never see a leave.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func quickStateChangesEndOnTheLastOneWithoutALeave(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(leaseTTL: 10)
        let watcherStore = RemoteCartStore(server: server.url, presence: .init())
        let watcher = PresenceRecorder()
        watcherStore.observers.add(watcher, carts: .only(["shared"]))
        let typing = RemoteCartStore(server: server.url, transport: transport, presence: .init(state: ["typed": 0]))
        let typingObserver = PresenceRecorder()
        typing.observers.add(typingObserver, carts: .only(["shared"]))
        let key = try #require(typing.presenceKey)
        await eventually("the watcher sees the typing store") { watcher.members(of: "shared").contains { $0.member == key } }
        for typed in 1...30 {
            try typing.setPresenceState(["typed": .number(Double(typed))])
            try await Task.sleep(for: .milliseconds(10))
        }
        await eventually("the last state") { watcher.members(of: "shared").first { $0.member == key }?.state == ["typed": 30] }
        #expect(!watcher.changes.contains { $0.change.leftMember == key }, "no leave: \(watcher.changes.map(\.change))")
        #expect(watcher.changes.filter { $0.change.joinedMember == key }.count <= 1, "one join at most (none if it was there first)")
        await typing.close()
        await watcherStore.close()
        await server.stop()
    }

    /// A client process that stops (SIGSTOP: no close, no heartbeat) leaves at its lease's
    /// expiry, and the others are told why.
    @Test func aStoppedClientLeavesAtItsLeaseExpiry() async throws {
        let server = try await ServerUnderTest(leaseTTL: 2)
        let store = RemoteCartStore(server: server.url, presence: .init())
        let seer = PresenceRecorder()
        store.observers.add(seer, carts: .only(["shared"]))
        let client = try await PresenceClientProcess(port: server.port, arguments: ["--cart", "shared", "--presence-key", "vanishing"])
        defer { client.signal(SIGKILL) }
        await eventually("the client's join") { seer.members(of: "shared").contains { $0.member == "vanishing" } }
        await eventually("the client prints the presence") { client.output.contains(#""type":"presence""#) }

        // The lease's own timing is tested on an embedded event loop (the server's tests).
        client.signal(SIGSTOP)
        await eventually("its leave") { seer.changes.contains { $0.change.leftMember == "vanishing" } }
        let leave = try #require(seer.changes.first { $0.change.leftMember == "vanishing" })
        #expect(leave.change.leaveReason == .leaseExpired)
        await client.end()
        await store.close()
        await server.stop()
    }

    /// A store whose connection dies without the server seeing it close (its network changed)
    /// reconnects with its key within the lease: the others see no leave and no join.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func aReconnectWithinTheLeaseShowsNoLeaveOrJoin(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest(leaseTTL: 10)
        let proxy = try SeveringProxy(upstreamPort: server.port)
        defer { proxy.closeAll() }
        let watcherStore = RemoteCartStore(server: server.url, presence: .init())
        let watcher = PresenceRecorder()
        watcherStore.observers.add(watcher, carts: .only(["shared"]))
        let movingStore = RemoteCartStore(server: proxy.url, transport: transport, presence: .init(state: ["screen": "cart"]))
        let moving = PresenceRecorder()
        movingStore.observers.add(moving, carts: .only(["shared"]))
        let key = try #require(movingStore.presenceKey)
        await eventually("the watcher sees the moving store") { watcher.members(of: "shared").contains { $0.member == key } }
        await eventually("both subscribers") { await server.subscribers() == 2 }
        let seen = watcher.changes.count
        let connections = proxy.connections

        proxy.severClients()
        await eventually("the moving store reconnects") { proxy.connections > connections && movingStore.connectionState == .live }
        await eventually("the new connection takes over") { await server.subscribers() == 3 && moving.wholes >= 2 }
        proxy.closeSevered()
        await eventually("the old connection is gone") { await server.subscribers() == 2 }
        // A witness: a change the watcher sees after the old connection's end.
        let witness = RemoteCartStore(server: server.url, presence: .init())
        let witnessObserver = PresenceRecorder()
        witness.observers.add(witnessObserver, carts: .only(["shared"]))
        await eventually("the witness's join") { watcher.members(of: "shared").contains { $0.member == witness.presenceKey } }
        let between = watcher.changes.dropFirst(seen).map(\.change)
        #expect(
            !between.contains { $0.leftMember == key || $0.joinedMember == key },
            "no leave and no join of the store that reconnected: \(between)")
        #expect(watcher.members(of: "shared").contains { $0.member == key })
        await witness.close()
        await movingStore.close()
        await watcherStore.close()
        await server.stop()
    }

    /// A store that follows every cart goes without presence, and says why; its carts are
    /// served as usual.
    @Test func presenceOnEveryCartIsUnavailableAndSaysWhy() async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let store = RemoteCartStore(server: server.url, presence: .init())
        let everything = Recorder()
        store.observers.add(everything, carts: .all)
        let named = PresenceRecorder()
        store.observers.add(named, carts: .only(["a"]))
        await eventually("loaded") { everything.isLoaded && named.isLoaded }
        await eventually("told why") { named.changes.contains { $0.change.unavailableCode == .invalidPresence } }
        #expect(store.presenceProblem?.code == .invalidPresence)
        await server.add("a", "later")
        await eventually("events flow") { everything.events.contains { $0.addedSKU == "later" } }
        await store.close()
        await server.stop()
    }

    /// The server refuses the store's presence (a state over the limit: `fanout-server` has no
    /// option to make a cart full yet): the store carries on with the carts and says why, typed,
    /// to its observers and to the view.
    @Test(arguments: FanoutSubscription.Transport.allCases)
    func refusedPresenceLeavesTheCartsServedAndSaysWhy(transport: FanoutSubscription.Transport) async throws {
        let server = try await ServerUnderTest()
        await server.add("a", "seed")
        let tooLarge: PresenceState = ["note": .string(String(repeating: "x", count: PresenceLimits.maxStateBytes))]
        let store = RemoteCartStore(server: server.url, transport: transport, presence: .init(state: tooLarge))
        let observed = await ObservedCartsProbe.make(store)
        let recorder = Recorder()
        store.observers.add(recorder, carts: .only(["a"]))
        let presence = PresenceRecorder()
        store.observers.add(presence, carts: .only(["a"]))
        await eventually("loaded") { recorder.isLoaded }
        await eventually("told why") { presence.changes.contains { $0.change.unavailableCode == .invalidPresenceState } }
        #expect(store.presenceProblem?.code == .invalidPresenceState)
        await eventually("the view says so") { await observed.unavailableCode() == .invalidPresenceState }
        await server.add("a", "later")
        await eventually("events flow") { recorder.events.contains { $0.addedSKU == "later" } }
        #expect(store.connectionState == .live)
        #expect(recorder.record.withLockedValue { $0.states }.allSatisfy { !$0.isRefused }, "the store itself is never refused")
        #expect(throws: RemoteStoreError.self) { try store.setPresenceState(tooLarge) }
        withExtendedLifetime(observed) {}
        await store.close()
        await server.stop()
    }

    @Test func theCommandRefusesAPresenceStateThatIsNotJSON() async throws {
        let outcome = try await runToExit(
            "fanout-client", ["subscribe", "--cart", "a", "--presence-state", "{editing: true}"], timeout: .seconds(20))
        #expect(outcome.status != 0)
        #expect(outcome.standardError.contains("--presence-state must be a JSON object"), "stderr: \(outcome.standardError)")
        let badKey = try await runToExit(
            "fanout-client", ["subscribe", "--cart", "a", "--presence-key", "no spaces"], timeout: .seconds(20))
        #expect(badKey.status != 0)
        #expect(badKey.standardError.contains("--presence-key"), "stderr: \(badKey.standardError)")
    }
}

/// An `ObservedCarts` made and read on the main actor.
@MainActor
final class ObservedCartsProbe {
    let view: ObservedCarts

    init(_ store: RemoteCartStore) {
        view = ObservedCarts(store, carts: .only(["a"]))
    }

    static func make(_ store: RemoteCartStore) async -> ObservedCartsProbe { ObservedCartsProbe(store) }

    func unavailableCode() -> FanoutErrorCode? { view.presenceUnavailable["a"]?.code }
}

/// An observer that records every presence callback, with when it came.
final class PresenceRecorder: CartObserver {
    struct Change {
        var cartID: String
        var members: [PresenceMember]
        var change: PresenceChange
        var at: ContinuousClock.Instant
    }

    private let record = NIOLockedValueBox<(loaded: Bool, changes: [Change])>((false, []))

    func cartSource(_ source: any CartSource, didLoad carts: [Cart]) {
        record.withLockedValue { $0.loaded = true }
    }

    func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange) {
        let now = ContinuousClock.now
        record.withLockedValue { $0.changes.append(Change(cartID: cartID, members: members, change: change, at: now)) }
    }

    var isLoaded: Bool { record.withLockedValue { $0.loaded } }
    var changes: [Change] { record.withLockedValue { $0.changes } }
    var wholes: Int { changes.filter { if case .whole = $0.change { true } else { false } }.count }

    func members(of cartID: String) -> [PresenceMember] { changes.last { $0.cartID == cartID }?.members ?? [] }
    func member(_ user: String, of cartID: String) -> PresenceMember? { members(of: cartID).first { $0.user == user } }
    func joined(_ user: String) -> Bool { changes.contains { $0.change.joinedUser == user } }
    func left(_ user: String) -> Bool { changes.contains { $0.change.leftUser == user } }
    func updated(_ user: String) -> Bool {
        changes.contains { if case .updated(let member) = $0.change { member.user == user } else { false } }
    }
}

extension PresenceChange {
    var joinedUser: String? { if case .joined(let member) = self { member.user } else { nil } }
    var joinedMember: String? { if case .joined(let member) = self { member.member } else { nil } }
    var leftUser: String? { if case .left(let id, _) = self { id.user } else { nil } }
    var leftMember: String? { if case .left(let id, _) = self { id.member } else { nil } }
    var leaveReason: PresenceLeaveReason? { if case .left(_, let reason) = self { reason } else { nil } }
}

/// `fanout-client subscribe --presence` as a process, its output kept.
final class PresenceClientProcess: Sendable {
    private let process: ChildProcess

    init(port: Int, arguments: [String]) async throws {
        process = try await ChildProcess(
            ServerProcess.executable("fanout-client"),
            ["subscribe", "--url", "ws://127.0.0.1:\(port)/subscribe", "--format", "json"] + arguments)
    }

    var output: String { process.standardOutput }

    func signal(_ signal: Int32) { process.signal(signal) }

    /// Kills it, and waits until it has exited.
    func end() async { await process.kill() }
}

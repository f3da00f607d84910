import CartStore
import FanoutClient
import FanoutServer
import FanoutTestSupport
import Foundation
import Observation
import Testing

/// "Who else is looking at this cart", as an app shows it: a `@MainActor` view model that
/// implements the presence callback, and an `@Observable` view reading `presence`.
@MainActor
final class WhoIsLookingModel: MainActorCartObserver {
    private(set) var others: [String] = []
    private(set) var lastLeave: PresenceLeaveReason?
    private(set) var unavailable: FanoutErrorCode?
    let me: String?

    init(_ store: RemoteCartStore, cart id: String) {
        me = store.presenceKey
        store.observers.add(self, carts: .only([id]))
    }

    func cartSource(_ source: any CartSource, didChangePresence members: [PresenceMember], of cartID: String, change: PresenceChange) {
        others = members.filter { $0.member != me }.map(\.member)
        switch change {
        case .left(_, let reason): lastLeave = reason
        case .unavailable(let error): unavailable = error.code
        case .whole, .joined, .updated: break
        }
    }
}

@Suite("Presence in a view model", .serialized, .timeLimit(.minutes(2)))
@MainActor
struct PresenceViewModelTests {
    @Test func aViewModelAndAViewSeeWhoElseIsLooking() async throws {
        let (server, api, cleanup) = try await startServer()
        defer { cleanup() }
        let url = api.baseURL
        let mine = RemoteCartStore(server: url, presence: .init(state: ["screen": "cart"]))
        let model = WhoIsLookingModel(mine, cart: "alice")
        let view = ObservedCarts(mine, carts: .only(["alice"]))
        #expect(await until { view.presence["alice"]?.count == 1 }, "the store's own member first")

        let theirs = RemoteCartStore(server: url, transport: .serverSentEvents, presence: .init(state: ["screen": "cart"]))
        var theirView: ObservedCarts? = ObservedCarts(theirs, carts: .only(["alice"]))
        #expect(await until { model.others == [theirs.presenceKey].compactMap { $0 } }, "the other one joins")
        #expect(await until { view.presence["alice"]?.count == 2 })

        try theirs.setPresenceState(["screen": "checkout"])
        #expect(await until { view.presence["alice"]?.contains { $0.state["screen"] == "checkout" } == true }, "and changes its state")
        #expect(theirView?.presence["alice"] != nil)

        theirView = nil
        #expect(await until { model.others.isEmpty && model.lastLeave == .closed }, "and leaves when its view goes")
        #expect(await until { view.presence["alice"]?.count == 1 })
        #expect(model.unavailable == nil)
        await mine.close()
        await theirs.close()
        try await server.stop()
    }
}

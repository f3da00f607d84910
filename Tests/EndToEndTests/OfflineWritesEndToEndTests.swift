import FanoutProtocol
import FanoutTestSupport
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Writes an app takes offline, through a `RemoteCartStore` kept in a cache file, survive the app
/// being killed (SIGKILL) and the server restarting, and reach the server exactly once, in order
/// per cart; also when the server committed the first run's write after that run was gone (its
/// answer lost). The app is `remote-store-probe`, debug here, release in ./scripts/test-release.
@Suite("Offline writes", .tags(.processes), .outsideTheFastSet, .timeLimit(.minutes(3)))
struct OfflineWritesEndToEndTests {
    @Test func twoHundredWritesThroughAKilledAppAndARestartedServerAreAppliedOnceInOrder() async throws {
        let (database, cleanup) = try Mutations.temporaryDatabase()
        defer { cleanup() }
        let cache = FileManager.default.temporaryDirectory.appendingPathComponent("fanout-offline-\(UUID().uuidString).sqlite")
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: cache.path + suffix) }
        }
        var server = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let port = server.port
        let url = "http://127.0.0.1:\(port)"
        // Frozen: the app's first write is sent and waits, unanswered, while the app takes 100.
        server.signal(SIGSTOP)
        let killed = try await runToExit(
            "remote-store-probe", ["--offline-writes", url, cache.path, "0", "200", "100"], timeout: .seconds(60))
        #expect(killed.status != 0, "the app was killed mid-way")
        // The server commits what it was sent, then restarts.
        server.signal(SIGCONT)
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
        server = try await ServerProcess(arguments: ["--port", "\(port)", "--db", database])

        let again = try await runToExit("remote-store-probe", ["--offline-writes", url, cache.path, "100", "200"], timeout: .seconds(120))
        #expect(again.status == 0, "stderr: \(again.standardError)")
        #expect(again.standardOutput.contains("100 restored and 100 taken"), "the killed app's writes restored: \(again.standardOutput)")

        let (data, _) = try await URLSession.shared.data(from: URL(string: "\(url)/events?since=0&limit=500")!)
        let log = try FanoutJSON.decoder().decode(EventsPage.self, from: data).events
        #expect(log.count == 200, "each write once: \(log.count) events")
        #expect(Set(log.compactMap(\.idempotencyKey)).count == 200, "each with its own key")
        let (cartsData, _) = try await URLSession.shared.data(from: URL(string: "\(url)/carts")!)
        let carts = Dictionary(
            uniqueKeysWithValues: try FanoutJSON.decoder().decode(CartsResponse.self, from: cartsData).carts.map { ($0.id, $0) })
        for cart in 0..<20 {
            var expected = Cart(id: "o\(cart)")
            for index in stride(from: cart, to: 200, by: 20) {
                let change = try CartWrite.addItem(sku: "s\(index / 20)", quantity: 1 + index % 3, unitPriceCents: 10, name: nil)
                    .change(to: expected)
                expected.apply(CartEvent(seq: 0, cartID: expected.id, change: change, version: expected.version + 1, committedAt: Date()))
            }
            #expect(carts["o\(cart)"]?.items == expected.items, "o\(cart): every write once, in the order made")
        }
        server.signal(SIGTERM)
        _ = await server.waitForExit()
    }
}

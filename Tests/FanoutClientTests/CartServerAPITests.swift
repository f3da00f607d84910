import FanoutClient
import FanoutProtocol
import FanoutTestSupport
import Foundation
import Testing

/// `CartServerAPI`'s promises to an app: what breaks the server's rules is refused before it is
/// sent, and a version conflict says the version the cart is at.
@Suite("Cart server API", .serialized, .timeLimit(.minutes(2)))
struct CartServerAPITests {
    /// Nothing listens at this address: a request that went out would be `unreachable`.
    static let nowhere = CartServerAPI(baseURL: URL(string: "http://127.0.0.1:9")!)

    @Test func valuesTheServerWouldRefuseAreRefusedUnsent() async throws {
        let cases: [(String, @Sendable () async throws -> Void, FanoutErrorCode)] = [
            ("sku", { _ = try await Self.nowhere.addItem("no spaces", quantity: 1, unitPriceCents: 1, to: "a") }, .invalidSKU),
            ("quantity", { _ = try await Self.nowhere.addItem("s", quantity: 0, unitPriceCents: 1, to: "a") }, .invalidQuantity),
            ("price", { _ = try await Self.nowhere.addItem("s", quantity: 1, unitPriceCents: -1, to: "a") }, .invalidPrice),
            (
                "name",
                {
                    _ = try await Self.nowhere.addItem(
                        "s", quantity: 1, unitPriceCents: 1, name: String(repeating: "n", count: 201), to: "a")
                },
                .invalidName
            ),
            ("cart id", { _ = try await Self.nowhere.addItem("s", quantity: 1, unitPriceCents: 1, to: "..") }, .invalidCartID),
            ("set quantity", { _ = try await Self.nowhere.setQuantity(of: "s", to: -1, in: "a") }, .invalidQuantity),
            ("idempotency key", { _ = try await Self.nowhere.clear("a", idempotencyKey: "with space") }, .invalidIdempotencyKey),
        ]
        for (what, call, code) in cases {
            await #expect(throws: RemoteStoreError.self, "\(what)") {
                do {
                    try await call()
                } catch let error as RemoteStoreError {
                    guard case .invalid = error, error.code == code else {
                        Issue.record("\(what): \(error) (sent, or another code)")
                        throw error
                    }
                    throw error
                }
            }
        }
    }

    @Test func aVersionConflictSaysTheVersionTheCartIsAt() async throws {
        let server = try await ServerUnderTest()
        let api = CartServerAPI(baseURL: server.url)
        _ = try await api.addItem("a", quantity: 1, unitPriceCents: 1, to: "c")
        _ = try await api.addItem("b", quantity: 1, unitPriceCents: 1, to: "c")
        do {
            _ = try await api.addItem("x", quantity: 1, unitPriceCents: 1, to: "c", expectedVersion: 1)
            Issue.record("a change at the wrong version went through")
        } catch let error as RemoteStoreError {
            #expect(error.code == .versionConflict)
            #expect(error.currentVersion == 2)
        }
        await server.stop()
    }

    /// A write retried with its idempotency key (its answer lost) is made once, and answered the
    /// first answer; the key with another write is refused.
    @Test func aWriteRetriedWithItsKeyIsMadeOnce() async throws {
        let server = try await ServerUnderTest()
        let api = CartServerAPI(baseURL: server.url)
        let first = try await api.addItem("a", quantity: 2, unitPriceCents: 5, to: "c", idempotencyKey: "add-a")
        let retried = try await api.addItem("a", quantity: 2, unitPriceCents: 5, to: "c", idempotencyKey: "add-a")
        #expect(retried == first)
        #expect(try await api.cart("c").cart.items.map(\.quantity) == [2], "added once")
        let cleared = try await api.clear("c", idempotencyKey: "clear")
        #expect(try await api.clear("c", idempotencyKey: "clear") == cleared)
        do {
            _ = try await api.removeItem("a", from: "c", idempotencyKey: "add-a")
            Issue.record("a key reused for another write went through")
        } catch let error as RemoteStoreError {
            #expect(error.code == .idempotencyKeyReused)
        }
        #expect(try await api.cart("c").seq == 2)
        await server.stop()
    }
}

import FanoutProtocol
import Foundation
import Testing

/// A snapshot of a large store comes in parts: `"more":true` on every part but the last.
@Suite("Snapshot parts")
struct SnapshotPartsTests {
    static func carts(_ ids: String...) -> [Cart] { ids.map { Cart(id: $0, version: 1) } }

    static func object(_ message: ServerMessage) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: FanoutJSON.encoder().encode(message)) as? [String: Any])
    }

    @Test func moreIsSentOnlyWhenTrue() throws {
        #expect(try Self.object(.snapshot(carts: [], seq: 4, reason: .initial, more: true))["more"] as? Bool == true)
        #expect(try Self.object(.snapshot(carts: [], seq: 4, reason: .initial))["more"] == nil, "absent means the last part")
        let decoder = FanoutJSON.decoder()
        let old = #"{"type":"snapshot","carts":[],"seq":4,"reason":"initial"}"#
        #expect(try decoder.decode(ServerMessage.self, from: Data(old.utf8)) == .snapshot(carts: [], seq: 4, reason: .initial, more: false))
        let part = #"{"type":"snapshot","carts":[],"seq":4,"reason":"since_too_old","more":true}"#
        #expect(
            try decoder.decode(ServerMessage.self, from: Data(part.utf8)) == .snapshot(carts: [], seq: 4, reason: .sinceTooOld, more: true))
    }

    @Test func thePartsTogetherAreTheSnapshotOnlyAfterTheLast() throws {
        var assembly = SnapshotAssembly()
        #expect(try assembly.add(carts: Self.carts("a", "b"), seq: 7, reason: .initial, more: true) == nil)
        #expect(assembly.isIncomplete)
        #expect(try assembly.add(carts: Self.carts("c"), seq: 7, reason: .initial, more: true) == nil)
        let whole = try #require(try assembly.add(carts: Self.carts("d"), seq: 7, reason: .initial, more: false))
        #expect(whole.snapshot == CartSnapshot(carts: Self.carts("a", "b", "c", "d"), seq: 7))
        #expect(whole.reason == .initial)
        #expect(!assembly.isIncomplete)
        // A snapshot in one part, as every snapshot was before parts.
        #expect(try assembly.add(carts: Self.carts("z"), seq: 9, reason: .sinceAhead, more: false)?.snapshot.carts == Self.carts("z"))
    }

    @Test func partsOfDifferentSnapshotsAreRefused() throws {
        var assembly = SnapshotAssembly()
        _ = try assembly.add(carts: Self.carts("a"), seq: 7, reason: .initial, more: true)
        #expect(throws: SnapshotAssembly.Mismatch.self) {
            try assembly.add(carts: Self.carts("b"), seq: 8, reason: .initial, more: false)
        }
        _ = try assembly.add(carts: Self.carts("a"), seq: 7, reason: .initial, more: true)
        #expect(throws: SnapshotAssembly.Mismatch.self) {
            try assembly.add(carts: Self.carts("b"), seq: 7, reason: .sinceTooOld, more: false)
        }
    }
}

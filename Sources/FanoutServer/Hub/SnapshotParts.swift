import CartStore
import Foundation
import NIOCore

/// A snapshot as messages of bounded size: parts of at most `maxCarts` carts and, unless one
/// cart alone is larger, `maxBytes` of JSON, so that no client needs an unbounded message. Every
/// part carries the snapshot's seq and reason; all but the last say `"more":true`.
enum SnapshotParts {
    static let maxCarts = 500
    static let maxBytes = 256 * 1024

    static func encode(_ snapshot: CartSnapshot, reason: SnapshotReason) -> [WireMessage] {
        var parts: [WireMessage] = []
        var part = JSONBytes(capacity: 4_096)
        var cartsInPart = 0
        func startPart() {
            part = JSONBytes(capacity: 4_096)
            part.raw(#"{"carts":["#)
            cartsInPart = 0
        }
        func finishPart(more: Bool) {
            part.raw(#"],"#)
            if more { part.raw(#""more":true,"#) }
            part.raw(#""reason":"#)
            part.string(reason.rawValue)
            part.raw(#","seq":"#)
            part.int(snapshot.seq)
            part.raw(#","type":"snapshot"}"#)
            parts.append(WireMessage(type: .snapshot, json: ByteBuffer(bytes: part.bytes), seq: more ? nil : snapshot.seq))
        }
        startPart()
        for cart in snapshot.carts {
            var json = JSONBytes(capacity: 96 + cart.items.count * 96)
            json.cart(cart)
            if cartsInPart > 0, cartsInPart == maxCarts || part.bytes.count + json.bytes.count > maxBytes {
                finishPart(more: true)
                startPart()
            }
            if cartsInPart > 0 { part.raw(",") }
            part.raw(json.bytes)
            cartsInPart += 1
        }
        finishPart(more: false)
        return parts
    }
}

import CartStore
import Foundation
import NIOCore

/// Where an event becomes bytes for the wire: its message is made once per commit around the
/// change JSON the store wrote to the log (`EventJSON`), then framed once for each transport,
/// and those same buffers go to every subscriber (`ByteBuffer` is copy-on-write, so sharing one
/// copies nothing).
struct EventBytes: Sendable {
    let seq: Int64
    let cartID: String
    /// The event framed for each transport, by `WireFraming.rawValue`.
    private let framed: [ByteBuffer]

    init(_ event: CartEvent) {
        seq = event.seq
        cartID = event.cartID
        framed = WireFraming.frameForAll(ServerEncoding.event(event))
    }

    func framed(for framing: WireFraming) -> ByteBuffer { framed[framing.rawValue] }
}

import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// How the server ends a connection it has given up on: after its last bytes have left, or at a
/// deadline if the client does not read them. Used for every answer that ends a connection (a
/// refused request, an ended subscriber), so a client that stops reading can never hold one
/// open, nor its descriptor and kernel buffers.
extension Channel {
    /// Closes the connection once `written` has left, or at `limit` if it has not (then with a
    /// reset: see `reset`).
    func close(after written: EventLoopFuture<Void>, within limit: TimeAmount) {
        let channel = self
        let deadline = eventLoop.scheduleTask(in: limit) { channel.reset() }
        written.whenComplete { _ in
            deadline.cancel()
            channel.close(promise: nil)
        }
    }

    /// Closes the connection with what is still unsent dropped (`SO_LINGER` 0: a reset), so the
    /// kernel does not go on holding and retrying it either.
    func reset() {
        let channel = self
        let linger =
            (channel as? any SocketOptionProvider)?.setSoLinger(linger(l_onoff: 1, l_linger: 0))
            ?? channel.eventLoop.makeSucceededVoidFuture()
        linger.whenComplete { _ in channel.close(promise: nil) }
    }
}

import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP socket connected to 127.0.0.1:`port`, with `configure` applied before connecting.
public func connectedSocket(port: Int, configure: (Int32) -> Void = { _ in }) throws -> Int32 {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    configure(socket)
    var address = loopbackAddress(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        close(socket)
        throw POSIXError(.ECONNREFUSED)
    }
    return socket
}

/// A TCP port of 127.0.0.1 that nothing listens on now, for a program that cannot be given port 0
/// and tell which one it got: bound with port 0, read back, and let go. Another process may take
/// it before the program does.
public func freeLoopbackPort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard socket >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EMFILE) }
    defer { close(socket) }
    var address = loopbackAddress(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            Glibc.bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
        }
    }
    guard bound else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EADDRNOTAVAIL) }
    return Int(UInt16(bigEndian: address.sin_port))
}

private func loopbackAddress(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// `call` (a `recv` or `send`) again for as long as a signal interrupts it: with a timeout set on
/// the socket, even a handler installed with `SA_RESTART` ends the call with `EINTR`, and the
/// tests' processes get `SIGCHLD` whenever one of the children they start exits.
public func retryingInterrupted(_ call: () -> Int) -> Int {
    while true {
        let result = call()
        if result >= 0 || errno != EINTR { return result }
    }
}

/// Runs `work`, which blocks (a socket, a pipe, a child process), on a thread of its own and
/// waits for it without holding a thread of the concurrency pool. Not on
/// `DispatchQueue.global()`: on Linux its threads are as few as the cores, and the pool itself
/// runs on them, so a blocked call there stalls every other test of the process (a long-poll
/// held one for seconds, and leases lapsed).
public func onThreadOfItsOwn<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}

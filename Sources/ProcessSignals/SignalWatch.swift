import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Acts on SIGINT, SIGTERM and the like, whichever thread of the process the kernel hands them
/// to: a handler of its own writes each signal's number to a pipe, and a dispatch source reads
/// the pipe and calls back on a queue, where anything may be done.
///
/// Not `SIG_IGN` with a dispatch signal source (what swift-service-lifecycle does): on Linux
/// that source blocks the signal in its own thread only, and a process-directed signal the
/// kernel checks against another thread is discarded as ignored. Under load a test saw Ctrl-C
/// do nothing for 10 s.
///
/// Keep the watch alive for as long as signals should be acted on: a released watch stops
/// reading the pipe. The handlers stay installed for the life of the process.
public final class SignalWatch {
    private let source: any DispatchSourceRead

    /// Installs the handler for `signals` and calls `action` on `queue` for each one that
    /// arrives, with its number.
    ///
    /// - Throws: `SignalWatchError` when the pipe cannot be made.
    public init(_ signals: [Int32], queue: DispatchQueue = .global(), action: @escaping @Sendable (Int32) -> Void) throws {
        let ends = try SignalPipe.made.get()
        for signalNumber in signals {
            var handler = sigaction()
            let onSignal: @convention(c) (Int32) -> Void = { signalNumber in
                // Only async-signal-safe calls here: one write(2).
                var byte = UInt8(truncatingIfNeeded: signalNumber)
                _ = write(SignalPipe.ends?.write ?? -1, &byte, 1)
            }
            // The C union's Swift name differs between the C libraries.
            #if canImport(Darwin)
                handler.__sigaction_u.__sa_handler = onSignal
            #else
                handler.__sigaction_handler.sa_handler = onSignal
            #endif
            sigemptyset(&handler.sa_mask)
            handler.sa_flags = SA_RESTART
            sigaction(signalNumber, &handler, nil)
        }
        let readEnd = ends.read
        source = DispatchSource.makeReadSource(fileDescriptor: readEnd, queue: queue)
        source.setEventHandler {
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) == 1 {
                action(Int32(byte))
            }
        }
        source.resume()
    }

    deinit {
        source.cancel()
    }
}

/// The pipe cannot be made (out of file descriptors).
public struct SignalWatchError: Error, CustomStringConvertible {
    public let errno: Int32
    public var description: String { "cannot make a pipe for signals: errno \(errno)" }
}

/// The one pipe between the process's signal handler and the watches that read it. Its read
/// end does not block, so a watch reads what is there and stops; nor does its write end, so a
/// handler never waits (a signal beyond a full pipe is one of many already waiting).
enum SignalPipe {
    static let made: Result<(read: Int32, write: Int32), SignalWatchError> = {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return .failure(SignalWatchError(errno: errno)) }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        return .success((fds[0], fds[1]))
    }()

    static var ends: (read: Int32, write: Int32)? { try? made.get() }
}

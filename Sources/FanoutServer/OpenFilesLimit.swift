import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// The process's limit on open files: every connection holds a descriptor.
enum OpenFilesLimit {
    /// Descriptors kept for the database, its WAL, logs and the listener.
    static let reserve = 64
    /// Connections kept for requests when the limit bounds the subscribers: the API, `/healthz`
    /// and `/stats` still answer at the subscriber limit.
    static let requestRoom = 64

    /// The fewest connections a server runs with: below `reserve` + this, it refuses to start
    /// (`lowestUsable`) rather than accept connections it has no descriptor for (each accept
    /// then failed at once, and the loop retried it at 99 % of a core).
    static let fewestConnections = 16

    /// The lowest open-files limit a server starts under.
    static var lowestUsable: Int { reserve + fewestConnections }

    /// The most subscribers `connections` open connections leave room for.
    static func subscriberRoom(connections: Int) -> Int {
        max(1, connections - requestRoom)
    }

    /// Raises the soft limit to the hard limit (a shell's usual soft limit, 1 024, would lock
    /// clients out long before memory runs short), logs it, and returns the limit now in force.
    static func raise(logger: Logger) -> Int {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1_024 }
        let soft = limit.rlim_cur
        if soft < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 {
                logger.info("open files limit raised", metadata: ["fanout.limit.from": "\(soft)", "fanout.limit.to": "\(limit.rlim_cur)"])
                return Int(clamping: limit.rlim_cur)
            }
            logger.warning("open files limit could not be raised", metadata: ["fanout.limit": "\(soft)"])
        }
        return Int(clamping: soft)
    }
}

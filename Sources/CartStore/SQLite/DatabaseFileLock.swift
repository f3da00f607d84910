import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One process owns a database: an exclusive lock on `<database>-lock`, held for the store's life.
///
/// Two servers on one SQLite file would each fan out only their own commits, and a subscriber
/// of one would silently miss the other's. SQLite's own locks only serialise writes, so the
/// store takes this lock first, and a second store on the same file, in this process or another,
/// fails with `databaseInUse`. It is a `flock` on a file of its own: SQLite's locks are POSIX
/// locks on the database file, which closing any descriptor of that file in the process drops,
/// so the database file itself is never opened here. The kernel releases the lock when the
/// process dies, however it dies.
final class DatabaseFileLock: Sendable {
    private let descriptor: Atomic<Int32>

    init(databasePath path: String) throws {
        let lockPath = path + "-lock"
        let descriptor = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw CartStoreError(.storeUnavailable, "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(descriptor)
            if reason == EWOULDBLOCK {
                throw CartStoreError(
                    .databaseInUse,
                    "\(path) is in use by another fanout-server (one process owns a database; several servers need PostgreSQL)")
            }
            throw CartStoreError(.storeUnavailable, "cannot lock \(lockPath): \(String(cString: strerror(reason)))")
        }
        self.descriptor = Atomic(descriptor)
    }

    /// Lets another store open the database. Later calls do nothing.
    ///
    /// Unlocked before it is closed: the lock belongs to the open file, which a child process
    /// this one starts shares until its `exec` closes its copy, so a close alone can leave the
    /// file locked for that moment (a store reopened at once was once refused as in use).
    func release() {
        let descriptor = descriptor.exchange(-1, ordering: .acquiringAndReleasing)
        if descriptor >= 0 {
            flock(descriptor, LOCK_UN)
            close(descriptor)
        }
    }

    deinit { release() }
}

import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A disk that really fills: a tmpfs of a few MiB mounted on a new folder, for the tests of a
/// full disk. Mounting needs root (as the tests run in CI); elsewhere the tests that need it are
/// skipped with a message saying so (`needsSmallDisk`).
/// Used by one test at a time (its filler is not shared across threads at once).
public final class SmallDisk: @unchecked Sendable {
    public let directory: URL
    private var filler: FileHandle?

    /// Mounts a tmpfs of `bytes` on a new folder under the system temp folder.
    public init(bytes: Int) throws {
        directory = FileManager.default.temporaryDirectory.appending(path: "fanout-disk-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // mount(2) itself, as `mount -t tmpfs -o size=… tmpfs <folder>` does: no program to wait for.
        guard Glibc.mount("tmpfs", directory.path, "tmpfs", 0, "size=\(bytes)") == 0 else {
            let reason = String(cString: strerror(errno))
            try? FileManager.default.removeItem(at: directory)
            throw CocoaError(
                .fileWriteNoPermission,
                userInfo: [NSLocalizedDescriptionKey: "mounting a tmpfs failed (\(reason)): the full-disk tests need root"])
        }
    }

    public func path(_ name: String) -> String { directory.appending(path: name).path }

    /// Whether this machine lets the tests mount one (root, and mount allowed).
    public static let isAvailable: Bool = {
        guard let disk = try? SmallDisk(bytes: 64 * 1024) else { return false }
        disk.unmount()
        return true
    }()

    /// Fills what room is left with a file of its own, to the last page.
    public func fill() throws {
        if filler == nil {
            let path = self.path("filler")
            // Opening it for writing below throws if it could not be made.
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            filler = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        }
        guard let filler else { return }
        _ = try filler.seekToEnd()
        for size in [64 * 1024, 4 * 1024, 512, 1] {
            let chunk = Data(count: size)
            while (try? filler.write(contentsOf: chunk)) != nil {}
        }
    }

    /// Gives `bytes` of the filler back.
    public func free(_ bytes: Int) throws {
        guard let filler else { return }
        let size = try filler.seekToEnd()
        try filler.truncate(atOffset: size > UInt64(bytes) ? size - UInt64(bytes) : 0)
    }

    public func unmount() {
        try? filler?.close()
        filler = nil
        // Lazily (`umount -l`): a file the test left open does not keep it mounted.
        _ = umount2(directory.path, Int32(MNT_DETACH))
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { unmount() }
}

extension Trait where Self == ConditionTrait {
    /// For tests that fill a real disk (`SmallDisk`): skipped where it cannot be mounted,
    /// except in CI, where they fail instead.
    public static var needsSmallDisk: Self {
        .enabled(if: SmallDisk.isAvailable || runningInCI, "running the tests as root (to mount a small tmpfs) enables the full-disk tests")
    }
}

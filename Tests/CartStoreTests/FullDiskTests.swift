import FanoutTestSupport
import Foundation
import Testing

@testable import CartStore

/// A real full disk under the SQLite store (a small tmpfs): writes are refused with
/// `storageFull` and nothing acknowledged is lost, the health probe says so too, and writes
/// resume once a little room is freed, also after a restart.
@Suite("Full disk", .serialized, .timeLimit(.minutes(2)), .needsSmallDisk)
struct FullDiskTests {
    /// Writes until the store refuses for want of room; the disk is filled again after each
    /// refusal (the store gives the log's room back when it fails, which the filler takes).
    static func writeUntilFull(_ store: CartStore, _ disk: SmallDisk, acknowledged: inout [Int64]) async throws -> CartStoreError? {
        for index in 0..<5_000 {
            do {
                let commit = try await store.addItem(
                    cartID: "c\(index % 20)", sku: "s\(index % 500)", quantity: 1, unitPriceCents: 1,
                    name: String(repeating: "n", count: 150))
                acknowledged.append(commit.event.seq)
            } catch let error as CartStoreError where error.code == .storageFull {
                try disk.fill()
                return error
            }
            if index % 50 == 0 { try disk.fill() }
        }
        return nil
    }

    @Test func aFullDiskIsReportedByTheProbeAndWritesResumeOnceRoomIsFreed() async throws {
        let disk = try SmallDisk(bytes: 4 * 1024 * 1024)
        defer { disk.unmount() }
        let path = disk.path("store.sqlite")
        var store = try CartStore(path: path)
        var acknowledged: [Int64] = []
        try await store.addItem(cartID: "first", sku: "a", quantity: 1, unitPriceCents: 1)
        try disk.fill()
        let refusal = try await Self.writeUntilFull(store, disk, acknowledged: &acknowledged)
        #expect(refusal?.code == .storageFull, "the writes should have filled the disk")

        // A write rolled back needs no room: the probe must not say yes while writes fail.
        await #expect { try await store.checkWritable() } throws: { CartStoreError.code($0) == .storageFull }
        await #expect { try await store.addItem(cartID: "late", sku: "a", quantity: 1, unitPriceCents: 1) } throws: {
            CartStoreError.code($0) == .storageFull
        }

        // A little room: the probe says yes again, and writes go through.
        try disk.free(256 * 1024)
        try await store.checkWritable()
        let resumed = try await store.addItem(cartID: "late", sku: "a", quantity: 1, unitPriceCents: 1)
        acknowledged.append(resumed.event.seq)

        // Full again, then closed (as at SIGTERM) and opened again with a little room freed.
        try disk.fill()
        _ = try await Self.writeUntilFull(store, disk, acknowledged: &acknowledged)
        try store.close()
        try disk.free(256 * 1024)
        store = try CartStore(path: path)
        defer { try? store.close() }
        let afterRestart = try await store.addItem(cartID: "restarted", sku: "a", quantity: 1, unitPriceCents: 1)
        acknowledged.append(afterRestart.event.seq)
        try await store.checkWritable()

        // Nothing acknowledged was lost, and the log has no gap.
        guard case .events(let log, _) = try await store.events(after: 0, limit: 10_000) else {
            Issue.record("the log was pruned")
            return
        }
        #expect(log.map(\.seq) == Array(1...Int64(log.count)), "a gap-free log")
        #expect(Set(acknowledged).isSubset(of: Set(log.map(\.seq))), "every acknowledged write is in the log")
    }

    /// A disk filled by the store's own writes, with nothing else to take the room it gives
    /// back: the probe said yes (a small probe fitted where no change did) while every write was
    /// refused, also after a restart on the full disk, and the write-ahead log kept its room.
    @Test func aDiskFilledByWritesAloneIsReportedFullAlsoAfterARestartAndItsLogRoomComesBack() async throws {
        let disk = try SmallDisk(bytes: 3 * 1024 * 1024)
        defer { disk.unmount() }
        // Room the test gives back at the end: the rest of the disk is the store's to fill.
        let ballast = disk.path("ballast")
        try Data(count: 1024 * 1024).write(to: URL(fileURLWithPath: ballast))
        let path = disk.path("store.sqlite")
        var store = try CartStore(path: path)
        var acknowledged: [Int64] = []
        var refused = 0
        for index in 0..<20_000 where refused < 25 {
            do {
                let commit = try await store.addItem(
                    cartID: "c\(index % 20)", sku: "s\(index % 500)", quantity: 1, unitPriceCents: 1,
                    name: String(repeating: "n", count: 150))
                acknowledged.append(commit.event.seq)
                refused = 0
            } catch let error as CartStoreError where error.code == .storageFull {
                refused += 1
                // What /healthz asks between the refused writes: it must say the same.
                await #expect { try await store.checkWritable() } throws: { CartStoreError.code($0) == .storageFull }
            }
        }
        #expect(refused == 25, "the writes should have filled the disk")

        // Stopped (as at SIGTERM) and started again on the full disk: still full, and said so.
        try store.close()
        let log = try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int ?? 0
        #expect(log <= SQLiteBackend.logPages * 4_096 + 256 * 1024, "the write-ahead log is bounded (\(log) bytes)")
        store = try CartStore(path: path)
        defer { try? store.close() }
        await #expect { try await store.checkWritable() } throws: { CartStoreError.code($0) == .storageFull }
        await #expect { try await store.addItem(cartID: "late", sku: "a", quantity: 1, unitPriceCents: 1) } throws: {
            CartStoreError.code($0) == .storageFull
        }

        // The room a checkpoint needs (the log's size, 1 MiB) freed: writes resume, and the probe says so.
        try FileManager.default.removeItem(atPath: ballast)
        try await store.checkWritable()
        let resumed = try await store.addItem(cartID: "late", sku: "a", quantity: 1, unitPriceCents: 1)
        acknowledged.append(resumed.event.seq)
        guard case .events(let events, _) = try await store.events(after: 0, limit: 10_000) else {
            Issue.record("the log was pruned")
            return
        }
        #expect(events.map(\.seq) == Array(1...Int64(events.count)), "a gap-free log")
        #expect(Set(acknowledged).isSubset(of: Set(events.map(\.seq))), "every acknowledged write is in the log")
    }
}

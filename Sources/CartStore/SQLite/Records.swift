import Foundation
import GRDB

/// The durable event log, `cart_events`, as pruning names it (reads are cached statements,
/// `SQLiteBackend.readEvents`; writes are prepared statements, `SQLiteBackend.apply`).
enum CartEventRow: TableRecord {
    static let databaseTableName = "cart_events"

    enum Columns {
        static let seq = Column("seq")
        static let committedAt = Column("committed_at")
    }
}

extension Date {
    package init(millisecondsSince1970 milliseconds: Int64) {
        self.init(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    package var millisecondsSince1970: Int64 {
        Int64((timeIntervalSince1970 * 1000).rounded(.down))
    }
}

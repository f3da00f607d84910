import EventLoopExecutor
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import Testing

@testable import CartStore
@testable import CartStorePostgres

/// How a server's follower takes a batch from its notification, without a database: one it
/// would have to read the log for is never delivered here (the pool it would read through is
/// not running, so the read fails at its deadline), which is what the test looks for.
@Suite("PostgreSQL follower")
struct PostgresFollowerTests {
    /// A follower delivered through seq 0, and the seqs it delivers.
    static func follower() -> (PostgresFollower, NIOLockedValueBox<[Int64]>) {
        let client = PostgresClient(
            configuration: .init(host: "127.0.0.1", port: 1, username: "nobody", password: nil, database: "none", tls: .disable))
        let connections = PostgresConnections(
            client: client, maximumConnections: 1, timeout: .milliseconds(200),
            executor: EventLoopTaskExecutor(PostgresClient.defaultEventLoopGroup.next()))
        let follower = PostgresFollower(connections: connections, deliveredThrough: 0, logger: Logger(label: "test"))
        let delivered = NIOLockedValueBox<[Int64]>([])
        follower.attach(EventSink { event in delivered.withLockedValue { $0.append(event.seq) } })
        return (follower, delivered)
    }

    /// Another server's batch committed just before this server took the seq row; its
    /// notification arrives while this server's own batch commits. It is delivered from the
    /// notification (it was skipped as if it were the own batch, and the committer then read
    /// the log for it), and the own batch after it from memory.
    @Test func anotherServersBatchHeardWhileTheOwnCommitsIsDeliveredFromItsNotification() async {
        let (follower, delivered) = Self.follower()
        let others = BatchAnnouncementTests.events(after: 0, 3)
        let own = BatchAnnouncementTests.events(after: 3, 2)
        follower.committingOwnBatch(through: 5)
        await follower.heard(BatchAnnouncementTests.payload(others, previous: 0))
        #expect(delivered.withLockedValue { $0 } == [1, 2, 3], "from the notification, not the log")
        // The own batch's notification may come before its committer delivers it: not read for.
        await follower.heard(BatchAnnouncementTests.payload(own, previous: 3))
        #expect(delivered.withLockedValue { $0 } == [1, 2, 3])
        await follower.deliverQuietly(own, following: 3)
        #expect(delivered.withLockedValue { $0 } == [1, 2, 3, 4, 5], "the own batch from memory, once")
    }

    /// A notification that does not follow what was delivered is not taken from: the follower
    /// reads the log (here it cannot, and delivers nothing rather than out of order).
    @Test func aBatchThatDoesNotFollowIsNotDeliveredFromItsNotification() async {
        let (follower, delivered) = Self.follower()
        await follower.heard(BatchAnnouncementTests.payload(BatchAnnouncementTests.events(after: 2, 2), previous: 2))
        #expect(delivered.withLockedValue { $0 }.isEmpty)
    }
}

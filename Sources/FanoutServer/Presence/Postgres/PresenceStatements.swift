import FanoutProtocol
import PostgresNIO

/// The statements of `PostgresPresence` (Migrations/0004_presence.sql), prepared once
/// per connection. Times are the database's clock, never a node's.
enum PresenceStatements {
    static let channel = "fanout_presence"
    /// How long a member left stays in the table, for the others to say why it went.
    static let departedFor = "interval '30 seconds'"
    /// How long a held row of a node that has no row may stay (see `Sweep`).
    static let orphanedFor = "interval '1 minute'"
    static var nodeTimeout: String { "interval '\(Int(PostgresPresence.nodeTimeout / .milliseconds(1))) milliseconds'" }

    /// The heartbeat: `true` when the node's row was there (so its members are as it wrote
    /// them), no row when it was not (never written, swept as dead, or emptied by a crash).
    /// Inside a write's transaction it also locks the row, so that no sweep takes the node
    /// for dead while it writes.
    struct Heartbeat: PostgresPreparedStatement {
        static let sql = "UPDATE presence_nodes SET seen_at = now() WHERE node = $1 RETURNING true"
        let node: String
        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(node)
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws -> Bool { try row.decode(Bool.self) }
    }

    /// One node's changes, as arrays: its row, the members it holds (written over whatever
    /// node held them: a takeover), the ones it left (only while it still holds them), and with
    /// `rewrite` every other row it holds marked left (`node_lost`), so that its rows are exactly
    /// what it holds. Then the doorbell: a notification naming the node.
    struct Write: PostgresPreparedStatement {
        static let sql = """
            WITH alive AS (
                INSERT INTO presence_nodes (node, seen_at) VALUES ($1, now())
                ON CONFLICT (node) DO UPDATE SET seen_at = now()),
            held AS (
                INSERT INTO presence_members (cart_id, user_id, member, node, state, since, left_reason, changed_at)
                SELECT c, u, m, $1, s, t, NULL, now()
                FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS h(c, u, m, s, t)
                ON CONFLICT (cart_id, user_id, member) DO UPDATE SET
                    node = excluded.node, state = excluded.state, since = excluded.since, left_reason = NULL,
                    changed_at = excluded.changed_at),
            gone AS (
                UPDATE presence_members AS p SET left_reason = g.reason, changed_at = now()
                FROM unnest($7::text[], $8::text[], $9::text[], $10::text[]) AS g(c, u, m, reason)
                WHERE (p.cart_id, p.user_id, p.member) = (g.c, g.u, g.m) AND p.node = $1 AND p.left_reason IS NULL),
            rest AS (
                UPDATE presence_members AS p SET left_reason = 'node_lost', changed_at = now()
                WHERE $11 AND p.node = $1 AND p.left_reason IS NULL
                    AND (p.cart_id, p.user_id, p.member) NOT IN (SELECT * FROM unnest($2::text[], $3::text[], $4::text[]))
                    AND (p.cart_id, p.user_id, p.member) NOT IN (SELECT * FROM unnest($7::text[], $8::text[], $9::text[])))
            SELECT pg_notify('\(channel)', $1)
            """
        let node: String
        let holds: [PresenceRow]
        let leaves: [(PresenceRegistry.Key, PresenceLeaveReason)]
        let rewrite: Bool

        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            let left = leaves.map { (PresenceRow.key($0.0), $0.1.rawValue) }
            binds.append(node)  // $1
            binds.append(holds.map(\.cart))  // $2
            binds.append(holds.map(\.user))  // $3
            binds.append(holds.map(\.member))  // $4
            binds.append(holds.map(\.state))  // $5
            binds.append(holds.map(\.since))  // $6
            binds.append(left.map(\.0.cart))  // $7
            binds.append(left.map(\.0.user))  // $8
            binds.append(left.map(\.0.member))  // $9
            binds.append(left.map(\.1))  // $10
            binds.append(rewrite)  // $11
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Housekeeping, by any node, never waiting for a node's write (`SKIP LOCKED`: a row locked
    /// is being written, so it is alive): deletes the rows of nodes silent past `nodeTimeout`
    /// and marks their members left (`node_lost`); marks left the held rows of a node that has
    /// no row at all, a minute after they were written (a takeover that failed halfway can leave
    /// one); forgets members left `departedFor` ago. Returns how many nodes it found dead.
    ///
    /// A node's write locks its row first (`Heartbeat`), so a sweep either sees it fresh or
    /// deletes it before the write, which then finds its row gone and writes everything again.
    struct Sweep: PostgresPreparedStatement {
        static let sql = """
            WITH dead AS (
                DELETE FROM presence_nodes WHERE node IN (
                    SELECT node FROM presence_nodes WHERE seen_at < now() - \(nodeTimeout) FOR UPDATE SKIP LOCKED)
                RETURNING node),
            lost AS (
                UPDATE presence_members SET left_reason = 'node_lost', changed_at = now()
                WHERE (cart_id, user_id, member) IN (
                    SELECT cart_id, user_id, member FROM presence_members AS p
                    WHERE p.left_reason IS NULL AND (
                        p.node IN (SELECT node FROM dead)
                        OR (p.changed_at < now() - \(orphanedFor)
                            AND NOT EXISTS (SELECT FROM presence_nodes AS n WHERE n.node = p.node)))
                    FOR UPDATE OF p SKIP LOCKED)),
            forgotten AS (
                DELETE FROM presence_members WHERE (cart_id, user_id, member) IN (
                    SELECT cart_id, user_id, member FROM presence_members
                    WHERE left_reason IS NOT NULL AND changed_at < now() - \(departedFor) FOR UPDATE SKIP LOCKED))
            SELECT count(*) FROM dead
            """
        func makeBindings() -> PostgresBindings { PostgresBindings() }
        func decodeRow(_ row: PostgresRow) throws -> Int64 { try row.decode(Int64.self) }
    }

    /// The others' rows: held ones with whether their node is alive, and those left lately.
    struct Read: PostgresPreparedStatement {
        static let sql = """
            SELECT p.cart_id, p.user_id, p.member, p.state, p.since, p.left_reason, n.seen_at >= now() - \(nodeTimeout)
            FROM presence_members AS p LEFT JOIN presence_nodes AS n ON n.node = p.node
            WHERE p.node <> $1 AND (p.left_reason IS NULL OR p.changed_at >= now() - \(departedFor))
            """
        let node: String
        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(node)
            return binds
        }
        func decodeRow(_ row: PostgresRow) throws -> ReadRow {
            let (cart, user, member, state, since, left, alive) = try row.decode(
                (String, String, String, String, Int64, String?, Bool?).self)
            return ReadRow(
                row: PresenceRow(cart: cart, user: user, member: member, state: state, since: since), left: left, alive: alive ?? false)
        }
    }

    /// One of the others' rows as `Read` reads it: the member's row, the reason it left (if it
    /// did), whether its node is alive.
    struct ReadRow: Sendable, Hashable {
        let row: PresenceRow
        let left: String?
        let alive: Bool
    }
}

extension PresenceView {
    /// The view of the others' rows (`PresenceStatements.Read`); a reason this version does
    /// not know reads as `closed`.
    init(rows: [PresenceStatements.ReadRow]) {
        self.init()
        for (row, left, alive) in rows.map({ ($0.row, $0.left, $0.alive) }) {
            if let left {
                departed[row.key] = PresenceLeaveReason(rawValue: left) ?? .closed
            } else if alive {
                members[row.key] = row.presenceMember
            } else {
                departed[row.key] = .nodeLost
            }
        }
    }
}

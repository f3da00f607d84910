-- Presence shared between the servers (nodes) on the database: which members each node holds
-- on which cart (`PostgresPresence`). Not durable, and kept out of the write-ahead log so that
-- it never slows the event log: UNLOGGED tables, emptied by PostgreSQL after a crash (each
-- node then writes again everything it holds). SQLite has no counterpart: one node.

-- One row per live node: each heartbeat (every second) sets seen_at to the database's clock,
-- so that nodes never compare their own clocks. A node silent for 5 s is gone: its row is
-- deleted by the first node that sweeps (and its members marked left, 'node_lost'). A node that
-- finds its row gone at its next heartbeat writes everything it holds again.
CREATE UNLOGGED TABLE presence_nodes (
    node TEXT PRIMARY KEY,
    seen_at TIMESTAMPTZ NOT NULL
);

-- One row per member key: held by `node` while left_reason is NULL; left (removed by its node,
-- or its node lost) otherwise, kept 30 s after changed_at so that the others can say why it
-- went, then deleted. A node that takes a key over writes its own name over the previous one's.
CREATE UNLOGGED TABLE presence_members (
    cart_id TEXT NOT NULL,
    user_id TEXT NOT NULL,     -- the token's sub; '' for an anonymous subscriber
    member TEXT NOT NULL,
    node TEXT NOT NULL,
    state TEXT NOT NULL,       -- a JSON object's text
    since BIGINT NOT NULL,     -- milliseconds since 1970 when the member joined
    left_reason TEXT,          -- NULL while held
    changed_at TIMESTAMPTZ NOT NULL,   -- the database's clock at the last write of the row
    PRIMARY KEY (cart_id, user_id, member)
);

CREATE INDEX presence_members_by_node ON presence_members (node);
CREATE INDEX presence_members_left ON presence_members (changed_at) WHERE left_reason IS NOT NULL;

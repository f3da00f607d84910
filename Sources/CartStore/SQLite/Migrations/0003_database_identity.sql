-- The database's identity: a UUID made once, when the database is created or first migrated
-- past this file, and never changed after. A client that keeps carts across runs compares it
-- with the one its copy came from (see docs/PROTOCOL.md, "The database's identity"): a restored
-- backup, a reset database or another server's has seqs in the same range, but not this.

CREATE TABLE database_identity (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    id TEXT NOT NULL
);

-- A random (version 4) UUID, lower case, from 16 random bytes: the version digit set to 4, and
-- the variant digit to one of 8, 9, a, b by the low two bits of its random digit.
INSERT INTO database_identity (only_row, id)
SELECT 1, lower(
    substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
    || substr('89AB', 1 + (instr('0123456789ABCDEF', substr(h, 17, 1)) - 1) % 4, 1) || substr(h, 18, 3) || '-'
    || substr(h, 21, 12))
FROM (SELECT hex(randomblob(16)) AS h);

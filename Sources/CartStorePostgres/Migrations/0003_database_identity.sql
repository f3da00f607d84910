-- The database's identity: a UUID made once, when the database is created or first migrated
-- past this file, and never changed after: the same as ../0003_database_identity.sql. Every
-- server on the database reports this one (gen_random_uuid: PostgreSQL 13 and newer).

CREATE TABLE database_identity (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    id TEXT NOT NULL
);
INSERT INTO database_identity (id) VALUES (gen_random_uuid()::text);

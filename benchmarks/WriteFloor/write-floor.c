// The floor under a durable fanout write: the statements one SQLite mutation runs (see
// Sources/CartStore/SQLite/SQLiteBackend.swift, `apply`), prepared once, on fanout's schema and
// pragmas (WAL, synchronous FULL, a 256-page log), without Swift, HTTP or an event. Each write
// adds one line to one of the carts the benchmark's writers use, in a savepoint, `batch` writes
// per transaction (one sync each). Prints the process's CPU (user + system) per write and the
// writes per second. Usage: write-floor DATABASE SCHEMA.sql WRITES BATCH
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static sqlite3 *db;

static void check(int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "write-floor: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *statement;
    check(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, NULL), sql);
    return statement;
}

static void run(sqlite3_stmt *statement) {
    int rc;
    while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {}
    check(rc, sqlite3_sql(statement));
    sqlite3_reset(statement);
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: write-floor DATABASE SCHEMA.sql WRITES BATCH\n");
        return 2;
    }
    int writes = atoi(argv[3]), batch = atoi(argv[4]);
    if (writes < 1 || batch < 1) {
        fprintf(stderr, "write-floor: WRITES and BATCH must be positive\n");
        return 2;
    }
    check(sqlite3_open(argv[1], &db), "open");
    FILE *file = fopen(argv[2], "r");
    if (!file) { perror(argv[2]); return 1; }
    static char schema[1 << 16];
    schema[fread(schema, 1, sizeof schema - 1, file)] = 0;
    fclose(file);
    check(sqlite3_exec(db,
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 256;"
        "PRAGMA journal_size_limit = 1048576;", NULL, NULL, NULL), "pragmas");
    check(sqlite3_exec(db, schema, NULL, NULL, NULL), "schema");

    sqlite3_stmt *begin = prepare("BEGIN IMMEDIATE TRANSACTION"), *commit = prepare("COMMIT TRANSACTION");
    sqlite3_stmt *savepoint = prepare("SAVEPOINT mutation"), *release = prepare("RELEASE SAVEPOINT mutation");
    sqlite3_stmt *version = prepare("SELECT version FROM carts WHERE id = ?");
    sqlite3_stmt *lines = prepare(
        "SELECT sku, quantity, unit_price_cents, name, position FROM cart_items WHERE cart_id = ? ORDER BY position");
    sqlite3_stmt *event = prepare(
        "INSERT INTO cart_events (cart_id, kind, change, cart_version, committed_at, idempotency_key) VALUES (?, ?, ?, ?, ?, ?)");
    sqlite3_stmt *cart = prepare(
        "INSERT INTO carts (id, version) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET version = excluded.version");
    sqlite3_stmt *line = prepare(
        "INSERT INTO cart_items (cart_id, sku, quantity, unit_price_cents, name, position) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (cart_id, sku) DO UPDATE SET quantity = excluded.quantity, "
        "unit_price_cents = excluded.unit_price_cents, name = excluded.name");

    double cpu0 = cpu_seconds(), wall0 = now_seconds();
    for (int i = 0; i < writes; i++) {
        if (i % batch == 0) run(begin);
        char cart_id[32], sku[16], change[160];
        // The writers' carts: writer i % 4, its (i / 4 / 10)-th cart, ten lines a cart.
        snprintf(cart_id, sizeof cart_id, "bench-%d-%d", i % 4, i / 40);
        snprintf(sku, sizeof sku, "sku-%d", i / 4 % 10);
        snprintf(change, sizeof change,
            "{\"itemAdded\":{\"item\":{\"sku\":\"%s\",\"quantity\":1,\"unitPriceCents\":100,\"name\":\"thing\"}}}", sku);
        run(savepoint);
        sqlite3_bind_text(version, 1, cart_id, -1, SQLITE_TRANSIENT);
        run(version);
        sqlite3_bind_text(lines, 1, cart_id, -1, SQLITE_TRANSIENT);
        run(lines);
        sqlite3_bind_text(event, 1, cart_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(event, 2, "itemAdded", -1, SQLITE_STATIC);
        sqlite3_bind_text(event, 3, change, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(event, 4, i / 4 % 10 + 1);
        sqlite3_bind_int64(event, 5, (sqlite3_int64)(now_seconds() * 1000));
        sqlite3_bind_null(event, 6);
        run(event);
        sqlite3_int64 seq = sqlite3_last_insert_rowid(db);
        sqlite3_bind_text(cart, 1, cart_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(cart, 2, i / 4 % 10 + 1);
        run(cart);
        sqlite3_bind_text(line, 1, cart_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(line, 2, sku, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(line, 3, 1);
        sqlite3_bind_int(line, 4, 100);
        sqlite3_bind_text(line, 5, "thing", -1, SQLITE_STATIC);
        sqlite3_bind_int64(line, 6, seq);
        run(line);
        run(release);
        if (i % batch == batch - 1 || i == writes - 1) run(commit);
    }
    double cpu = cpu_seconds() - cpu0, wall = now_seconds() - wall0;
    printf("{\"writes\":%d,\"batch\":%d,\"cpuMicrosPerWrite\":%.1f,\"writesPerSecond\":%.0f}\n",
        writes, batch, cpu * 1e6 / writes, writes / wall);
    sqlite3_close(db);
    return 0;
}

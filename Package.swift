// swift-tools-version:6.2
import PackageDescription

/// A product that only the server, its tools and tests use: resolved only under the trait
/// `Server` (an app that depends on the package with `traits: []` never checks it out).
func serverOnly(_ name: String, _ package: String) -> Target.Dependency {
    .product(name: name, package: package, condition: .when(traits: ["Server"]))
}

let package = Package(
    name: "fanout",
    // What the dependencies need (Synchronization's Atomic, NIO's typed WebSocket upgrader):
    // the libraries (CartStore, FanoutClient, WeakObservers, FanoutProtocol) are meant for apps
    // on these platforms too. Only Linux is built here; see the README.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "CartStore", targets: ["CartStore"]),
        // The PostgreSQL engine: the server's, for several servers on one database (trait Server).
        .library(name: "CartStorePostgres", targets: ["CartStorePostgres"]),
        .library(name: "FanoutProtocol", targets: ["FanoutProtocol"]),
        .library(name: "FanoutClient", targets: ["FanoutClient"]),
        .library(name: "WeakObservers", targets: ["WeakObservers"]),
        // An in-memory store an app's tests and SwiftUI previews script (no server).
        .library(name: "FanoutTesting", targets: ["FanoutTesting"]),
        .executable(name: "fanout-server", targets: ["FanoutServer"]),
        .executable(name: "fanout-client", targets: ["fanout-client"]),
    ],
    // What an app needs (CartStore on SQLite, FanoutClient, FanoutProtocol, WeakObservers) is
    // built on GRDB, SwiftNIO (and NIOSSL), swift-collections and swift-log alone. Everything
    // else is the server's and is used only under the trait `Server`, on by default: an app
    // that depends on this package with `traits: []` resolves none of those packages (see
    // docs/LIBRARIES.md). The benchmarks and their packages exist only with FANOUT_BENCHMARKS set.
    traits: [
        .trait(
            name: "Server",
            description: "fanout-server, fanout-client, the PostgreSQL engine (CartStorePostgres), the tests and their packages."
        ),
        .default(enabledTraits: ["Server"]),
    ],
    dependencies: [
        // The SQLite engine of CartStore.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // FanoutClient's connections, NIOConcurrencyHelpers' lock for every library; the
        // server's WebSocket, NIOEmbedded in its unit tests, fanout-bench's subscribers.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        // FanoutClient's wss:// and https://.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        // The server's (trait Server) from here on.
        // The PostgreSQL engine (CartStorePostgres): several servers on one database.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        // HTTP's types (`HTTPRequest`, `HTTPFields`) and NIO's handlers of them, which
        // Hummingbird speaks: the server names them where it builds answers and its channel.
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // `/metrics`: the swift-metrics API, exported in Prometheus text by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // The PostgreSQL store's service (its pool and follower), run in the server's group.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Per-user signed tokens (HS256 secret, or PEM/JWKS public keys): verified, never by hand.
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        // The tests' clock (`TestClock`): time they advance instead of waiting for it.
        .package(url: "https://github.com/pointfreeco/swift-clocks", from: "1.1.1"),
        // The programs the tests start (servers, clients, PostgreSQL, Chromium): exits seen
        // through a process descriptor, never missed. Used by the tests' support alone.
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
        // Its `FilePath` (swift-subprocess's own dependency).
        .package(url: "https://github.com/apple/swift-system", from: "1.5.0"),
        // `swift package generate-documentation`: DocC for CartStore and FanoutClient (.ci/run
        // builds it, warnings as errors). Used by no target, so never resolved by an app.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The cart value types and the wire messages, shared by the store, server and client.
        // The one observer protocol both stores serve sits on the weak observer set: how a
        // store's set holds a `CartObserver` (`WeakCartObserver`) is said there once.
        .target(name: "FanoutProtocol", dependencies: ["WeakObservers"]),
        // The weak observer set (the multicast delegate) that CartStore and FanoutClient share.
        .target(
            name: "WeakObservers",
            dependencies: [
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), .product(name: "DequeModule", package: "swift-collections"),
            ]),
        // A remote cart store: a live replica of a fanout-server's carts, observed like a
        // CartStore, kept in a file if asked. Foundation, SwiftNIO and GRDB only, so that apps on
        // every platform can import it.
        .target(
            name: "FanoutClient",
            dependencies: [
                "FanoutProtocol",
                "FanoutConcurrency",
                "WeakObservers",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // The replica's cache file (`RemoteCartStore(cacheFile:)`), as CartStore's SQLite.
                .product(name: "GRDB", package: "GRDB.swift"),
            ]
        ),
        // A store in memory that an app's tests and previews script: connection states,
        // rejections, presence, events from elsewhere. Nothing beyond FanoutClient's packages.
        .target(
            name: "FanoutTesting",
            dependencies: ["FanoutClient", "WeakObservers", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]
        ),
        // What waits and what is kept in order, shared by the store, the server and the client:
        // a wait bounded by a deadline (`Deadline`), a run of consecutive seqs in memory
        // (`SeqRun`), the wake-ups of a loop (`WakeUps`), a count of open things to wait out
        // (`OpenCount`). Foundation and SwiftNIO's helpers only, as the libraries apps import.
        .target(
            name: "FanoutConcurrency",
            dependencies: [
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"), .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        .target(name: "ProcessSignals"),
        // An event loop as a task's preferred executor: the server's connections, the PostgreSQL engine's batches.
        .target(
            name: "EventLoopExecutor",
            dependencies: ["FanoutConcurrency", .product(name: "NIOCore", package: "swift-nio")]
        ),
        // Carts and their event log in SQLite, observed in process; the engine protocol that
        // CartStorePostgres implements too.
        .target(
            name: "CartStore",
            dependencies: [
                "FanoutProtocol",
                "FanoutConcurrency",
                "WeakObservers",
                .product(name: "GRDB", package: "GRDB.swift"),
                // NIOLockedValueBox, the lock of shared state (see docs/ARCHITECTURE.md).
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // The SQLite engine's recent events (`RecentEvents`).
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            // The schema, compiled in (`PackageResources`), so a binary migrates its database
            // from any working directory; `Schema.migrations` lists them, and a test checks
            // that every file of the folder is there.
            resources: [
                .embedInCode("SQLite/Migrations/0001_create_carts.sql"),
                .embedInCode("SQLite/Migrations/0002_idempotency_keys.sql"),
                .embedInCode("SQLite/Migrations/0003_database_identity.sql"),
            ]
        ),
        // The PostgreSQL engine of CartStore: a `Service` the server runs (its pool and follower).
        .target(
            name: "CartStorePostgres",
            dependencies: [
                "CartStore",
                "EventLoopExecutor",
                "FanoutConcurrency",
                serverOnly("PostgresNIO", "postgres-nio"),
                serverOnly("ServiceLifecycle", "swift-service-lifecycle"),
                // `sslmode`: the connections' TLS (PostgresNIO's, over swift-nio-ssl).
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            // The PostgreSQL schema, compiled in as CartStore's is (`PostgresSchema.migrations`).
            resources: [
                .embedInCode("Migrations/0001_create_carts.sql"),
                .embedInCode("Migrations/0002_idempotency_keys.sql"),
                .embedInCode("Migrations/0003_database_identity.sql"),
                .embedInCode("Migrations/0004_presence.sql"),
                .embedInCode("Migrations/0005_lines_without_foreign_key.sql"),
                .embedInCode("Migrations/0006_carts_change_through_fanout.sql"),
            ]
        ),
        .executableTarget(
            name: "FanoutServer",
            dependencies: [
                "CartStore",
                "CartStorePostgres",
                "EventLoopExecutor",
                "FanoutConcurrency",
                "FanoutProtocol",
                "ProcessSignals",
                "CommandLineRepair",
                serverOnly("Hummingbird", "hummingbird"),
                serverOnly("HummingbirdCore", "hummingbird"),
                // `--tls-cert`/`--tls-key`: TLS in front of the connections (swift-nio-ssl).
                serverOnly("HummingbirdTLS", "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                serverOnly("ArgumentParser", "swift-argument-parser"),
                serverOnly("ServiceLifecycle", "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                serverOnly("HTTPTypes", "swift-http-types"),
                serverOnly("NIOHTTPTypes", "swift-nio-extras"),
                serverOnly("NIOHTTPTypesHTTP1", "swift-nio-extras"),
                // `/subscribe` is NIO's WebSocket upgrade and frame codec, driven by our handler.
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                serverOnly("Metrics", "swift-metrics"),
                serverOnly("CoreMetrics", "swift-metrics"),
                serverOnly("Prometheus", "swift-prometheus"),
                serverOnly("JWTKit", "jwt-kit"),
                // Presence shared through the database (`Presence/Postgres`): its statements.
                serverOnly("PostgresNIO", "postgres-nio"),
            ],
            // What the server serves, compiled in (`PackageResources`): it serves them from any
            // working directory with nothing installed beside it. `OpenAPI/openapi.json` is a
            // link to docs/openapi.json, the one copy.
            resources: [
                .embedInCode("OpenAPI/openapi.json"), .embedInCode("Page/index.html"), .embedInCode("Page/page.js"),
            ]
        ),
        .executableTarget(
            name: "fanout-client",
            dependencies: [
                // A thin command line over the library: every protocol rule lives there.
                "FanoutClient",
                "FanoutProtocol",
                "ProcessSignals",
                "CommandLineRepair",
                serverOnly("ArgumentParser", "swift-argument-parser"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        // Both command lines' parse errors, said as a person would (`ArgumentRepair`).
        .target(name: "CommandLineRepair", dependencies: [serverOnly("ArgumentParser", "swift-argument-parser")]),
        // Test helper: a child process that writes until it is killed (crash-survival tests).
        .executableTarget(
            name: "cartstore-crash-writer",
            dependencies: ["CartStore"],
            path: "Tests/CartStoreCrashWriter"
        ),
        // Benchmark: `swift run -c release fanout-bench`, fan-out against fanout-server or nchan
        // (benchmarks/compare.sh); EndToEndTests check what compare.sh relies on. Shares only
        // FanoutProtocol with fanout-client.
        .executableTarget(
            name: "fanout-bench",
            dependencies: [
                "FanoutProtocol",
                serverOnly("ArgumentParser", "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            path: "benchmarks/FanoutBench"
        ),
        // Test helper: RemoteCartStore's lifetime rules, run by EndToEndTests in the debug build
        // and again in the release build (./scripts/test-release).
        .executableTarget(
            name: "remote-store-probe",
            dependencies: ["FanoutClient"],
            path: "Tests/RemoteStoreProbe"
        ),
        // The test bundle's bound on how many tests run at once (4): set before Swift Testing starts.
        .target(name: "TestParallelism", path: "Tests/TestParallelism"),
        // Helpers shared by the test targets.
        .target(
            name: "FanoutTestSupport",
            dependencies: [
                "CartStore", "CartStorePostgres", "TestParallelism", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                serverOnly("Subprocess", "swift-subprocess"),
                serverOnly("SystemPackage", "swift-system"),
            ],
            path: "Tests/FanoutTestSupport"
        ),
        .testTarget(name: "FanoutProtocolTests", dependencies: ["FanoutProtocol"]),
        .testTarget(name: "FanoutConcurrencyTests", dependencies: ["FanoutConcurrency"]),
        // Runs the real executables; depends on them so `swift test` builds them.
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "FanoutTestSupport", "FanoutServer", "fanout-client", "fanout-bench", "remote-store-probe",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // The DevTools protocol of the headless Chromium that PageTests drive.
                serverOnly("HummingbirdWSClient", "hummingbird-websocket"),
            ]
        ),
        // The client's own logic (the subscriber's printing and resume state), in process.
        .testTarget(
            name: "FanoutClientTests",
            dependencies: [
                "FanoutClient", "fanout-client", "FanoutTestSupport", "FanoutServer", "CartStore", "WeakObservers", "FanoutConcurrency",
                serverOnly("Clocks", "swift-clocks"),
                // A cache file held by another connection (`CacheFileTests`).
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        // What an iOS developer writes first (Swift 6 language mode, nothing added): a
        // `@MainActor` view model observing a server's carts, or a local store's through the same
        // protocol, and an `@Observable` view of a cart.
        .testTarget(
            name: "AppTests",
            dependencies: ["FanoutClient", "FanoutTesting", "CartStore", "FanoutTestSupport", "FanoutServer"]
        ),
        // The same, as Xcode 26's app template builds an app: the main actor as default
        // isolation (Swift 6.2's approachable concurrency), and still nothing added.
        .testTarget(
            name: "AppDefaultIsolationTests",
            dependencies: ["FanoutClient", "CartStore"],
            swiftSettings: [.defaultIsolation(MainActor.self)]
        ),
        .testTarget(
            name: "FanoutServerTests",
            dependencies: [
                "FanoutServer",
                "EventLoopExecutor",
                "FanoutConcurrency",
                "FanoutTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                serverOnly("HummingbirdTesting", "hummingbird"),
                serverOnly("HummingbirdWSClient", "hummingbird-websocket"),
                // Forged and foreign tokens (RS256, ES256, EdDSA) signed in the tests.
                serverOnly("JWTKit", "jwt-kit"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CartStoreTests",
            dependencies: [
                "CartStore", "CartStorePostgres", "EventLoopExecutor", "FanoutTestSupport", "cartstore-crash-writer",
                serverOnly("PostgresNIO", "postgres-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The benchmarks with the packages only they use: there when asked for, never resolved by an
// app (Hummingbird gates its benchmarks the same way).
if Context.environment["FANOUT_BENCHMARKS"] != nil {
    package.dependencies.append(.package(url: "https://github.com/OpenCombine/OpenCombine", from: "0.14.0"))
    package.targets += [
        // `FANOUT_BENCHMARKS=1 swift run -c release cartstore-bench`: the store's mutations and
        // observers, beside OpenCombine's subject.
        .executableTarget(
            name: "cartstore-bench",
            dependencies: ["CartStore", .product(name: "OpenCombine", package: "OpenCombine")],
            path: "benchmarks/CartStoreBench"
        ),
        // What a one-route Hummingbird server costs per request (benchmarks/requests.sh), beside
        // fanout-server's /healthz.
        .executableTarget(
            name: "hummingbird-floor",
            dependencies: [.product(name: "Hummingbird", package: "hummingbird")],
            path: "benchmarks/HummingbirdFloor"
        ),
        // `FANOUT_BENCHMARKS=1 swift run -c release fanout-client-bench`: a RemoteCartStore's cost
        // per event and observer next to the bare weak observer set.
        .executableTarget(
            name: "fanout-client-bench",
            dependencies: ["FanoutClient", "WeakObservers"],
            path: "benchmarks/FanoutClientBench"
        ),
    ]
}

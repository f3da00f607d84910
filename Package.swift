// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "fanout",
    // What the dependencies need (Synchronization's Atomic, NIO's typed WebSocket upgrader):
    // the libraries (CartStore, FanoutClient, WeakObservers, FanoutProtocol) are meant for apps
    // on these platforms too. Only Linux is built here; see the README.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "CartStore", targets: ["CartStore"]),
        .library(name: "FanoutProtocol", targets: ["FanoutProtocol"]),
        .library(name: "FanoutClient", targets: ["FanoutClient"]),
        .library(name: "WeakObservers", targets: ["WeakObservers"]),
        .executable(name: "fanout-server", targets: ["FanoutServer"]),
        .executable(name: "fanout-client", targets: ["fanout-client"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // The PostgreSQL engine of CartStore: several servers on one database.
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // Already there under Hummingbird; named for the server's WebSocket, NIOEmbedded in its
        // unit tests, and fanout-bench's subscribers, which are plain NIO channels.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/OpenCombine/OpenCombine", from: "0.14.0"),
        // `/metrics`: the swift-metrics API, exported in Prometheus text by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Already there under PostgresNIO and Hummingbird; named for CartStore's services (the
        // PostgreSQL pool and follower, run in the server's service group).
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // Already there under the tests' Hummingbird WebSocket client; named for FanoutClient's
        // wss:// and https://.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        // `swift package generate-documentation`: DocC for CartStore and FanoutClient (.ci/run
        // builds it, warnings as errors).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // Per-user signed tokens (HS256 secret, or PEM/JWKS public keys): verified, never by hand.
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
    ],
    targets: [
        // The cart value types and the wire messages, shared by the store, server and client.
        .target(name: "FanoutProtocol"),
        // The weak observer set (the multicast delegate) that CartStore and FanoutClient share.
        .target(name: "WeakObservers", dependencies: [.product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        // A remote cart store: a live replica of a fanout-server's carts, observed like a
        // CartStore. Foundation and SwiftNIO only, so that apps on every platform can import it.
        .target(
            name: "FanoutClient",
            dependencies: [
                "FanoutProtocol",
                "WeakObservers",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .target(name: "ProcessSignals"),
        .target(
            name: "CartStore",
            dependencies: [
                "FanoutProtocol",
                "WeakObservers",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // NIOLockedValueBox, the lock of shared state (see docs/ARCHITECTURE.md).
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // The SQLite engine's recent events (`RecentEvents`).
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            plugins: ["EmbedMigrations"]
        ),
        .executableTarget(
            name: "FanoutServer",
            dependencies: [
                "CartStore",
                "FanoutProtocol",
                "ProcessSignals",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                // `/subscribe` is NIO's WebSocket upgrade and frame codec, driven by our handler.
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            // The page's source, compiled in by EmbedServedFiles rather than copied as a resource.
            exclude: ["Page/index.html", "Page/page.js"],
            plugins: ["EmbedServedFiles"]
        ),
        .executableTarget(
            name: "fanout-client",
            dependencies: [
                // A thin command line over the library: every protocol rule lives there.
                "FanoutClient",
                "FanoutProtocol",
                "ProcessSignals",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        // Build-time tool: turns migrations/*.sql into Swift source so every binary carries its schema.
        .executableTarget(name: "embed-migrations"),
        .plugin(
            name: "EmbedMigrations",
            capability: .buildTool(),
            dependencies: ["embed-migrations"]
        ),
        // Build-time tool: carries docs/openapi.json (GET /openapi.json) and the live cart page
        // (GET /) in fanout-server.
        .executableTarget(name: "embed-file"),
        .plugin(
            name: "EmbedServedFiles",
            capability: .buildTool(),
            dependencies: ["embed-file"]
        ),
        // Benchmark: `swift run -c release cartstore-bench`.
        .executableTarget(
            name: "cartstore-bench",
            dependencies: [
                "CartStore",
                .product(name: "OpenCombine", package: "OpenCombine"),
            ],
            path: "benchmarks/CartStoreBench"
        ),
        // Benchmark: what a one-route Hummingbird server costs per request (benchmarks/requests.sh,
        // PEERS=1), beside fanout-server's /healthz.
        .executableTarget(
            name: "hummingbird-floor",
            dependencies: [.product(name: "Hummingbird", package: "hummingbird")],
            path: "benchmarks/HummingbirdFloor"
        ),
        // Test helper: a child process that writes until it is killed (crash-survival tests).
        .executableTarget(
            name: "cartstore-crash-writer",
            dependencies: ["CartStore"],
            path: "Tests/CartStoreCrashWriter"
        ),
        // Benchmark: `swift run -c release fanout-client-bench`, a RemoteCartStore's cost per event
        // and observer next to the bare weak observer set.
        .executableTarget(
            name: "fanout-client-bench",
            dependencies: ["FanoutClient", "WeakObservers"],
            path: "benchmarks/FanoutClientBench"
        ),
        // Benchmark: `swift run -c release fanout-bench`, fan-out against fanout-server or nchan
        // (benchmarks/compare.sh). Shares only FanoutProtocol with fanout-client.
        .executableTarget(
            name: "fanout-bench",
            dependencies: [
                "FanoutProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
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
        // Helpers shared by the test targets.
        .target(
            name: "FanoutTestSupport",
            dependencies: ["CartStore", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            path: "Tests/FanoutTestSupport"
        ),
        .testTarget(name: "FanoutProtocolTests", dependencies: ["FanoutProtocol"]),
        // Runs the real executables; depends on them so `swift test` builds them.
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "FanoutTestSupport", "FanoutServer", "fanout-client", "fanout-bench", "remote-store-probe",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // The DevTools protocol of the headless Chromium that PageTests drive.
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
            ]
        ),
        // The client's own logic (the subscriber's printing and resume state), in process.
        .testTarget(
            name: "FanoutClientTests",
            dependencies: [
                "FanoutClient", "fanout-client", "FanoutTestSupport", "FanoutServer", "CartStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        // What an iOS developer writes first (Swift 6 language mode, nothing added): a
        // `@MainActor` view model observing a server's carts, or a local store's through the same
        // protocol, and an `@Observable` view of a cart.
        .testTarget(
            name: "AppTests",
            dependencies: ["FanoutClient", "CartStore", "FanoutTestSupport", "FanoutServer"]
        ),
        .testTarget(
            name: "FanoutServerTests",
            dependencies: [
                "FanoutServer",
                "FanoutTestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                // Forged and foreign tokens (RS256, ES256, EdDSA) signed in the tests.
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "CartStoreTests",
            dependencies: [
                "CartStore", "FanoutTestSupport", "cartstore-crash-writer", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

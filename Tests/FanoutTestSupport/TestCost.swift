import Foundation
import TestParallelism
import Testing

extension Tag {
    /// Starts processes of its own: `fanout-server`, `fanout-client`, a probe, openssl,
    /// schemathesis, a writer killed mid-write.
    @Tag public static var processes: Self
    /// Starts PostgreSQL, or uses the shared test cluster.
    @Tag public static var postgres: Self
    /// Drives a headless Chromium.
    @Tag public static var browser: Self
}

/// With `FANOUT_FAST_TESTS` set (not empty), only the fast set runs: the tests that stay in
/// this process and need no PostgreSQL or browser (CONTRIBUTING.md). CI never sets it.
public let fastTestsOnly = !(ProcessInfo.processInfo.environment["FANOUT_FAST_TESTS"] ?? "").isEmpty

extension Trait where Self == ConditionTrait {
    /// A suite outside the fast set (tagged with what it costs): skipped when
    /// `FANOUT_FAST_TESTS` is set, with a message saying so.
    public static var outsideTheFastSet: Self {
        .disabled(if: fastTestsOnly, "FANOUT_FAST_TESTS is set: this suite starts processes, PostgreSQL or a browser")
    }
}

/// How many tests this bundle runs at once: 4 (Tests/TestParallelism), unless
/// `SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH` says otherwise.
public let testParallelismWidth = Int(fanout_test_parallelism_width())

import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import Prometheus

#if canImport(Glibc)
    import Glibc
#endif

/// The build and the process, in the names every Prometheus set-up knows:
/// `fanout_build_info{version}` (always 1), and the standard `process_*` figures, read from
/// `/proc/self` at each scrape (Linux; elsewhere they stay 0).
struct ProcessMetrics: Sendable {
    /// A counter, as `_total` says: advanced by what the process spent since the last scrape.
    private let cpu: Counter
    private let cpuShown = NIOLockedValueBox<Double>(0)
    private let resident: Gauge
    private let openFiles: Gauge
    private let maxFiles: Gauge
    private let startTime: Gauge

    init(registry: PrometheusCollectorRegistry) {
        func gauge(_ namespace: String, _ name: String, _ unit: String, _ help: String, labels: [(String, String)] = []) -> Gauge {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(namespace: namespace, metricName: name, unitName: unit, helpText: help), labels: labels)
        }
        gauge(
            "fanout", "build", "info", "The running build: its version, as a label; always 1.", labels: [("version", FanoutVersion.current)]
        )
        .set(to: 1)
        cpu = registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "process", metricName: "cpu_seconds", unitName: "total", helpText: "User and system CPU time spent, in seconds.")
        )
        resident = gauge("process", "resident_memory", "bytes", "Resident memory size, in bytes.")
        openFiles = gauge("process", "open", "fds", "Open file descriptors.")
        maxFiles = gauge("process", "max", "fds", "The most open file descriptors the process may have.")
        startTime = gauge("process", "start_time", "seconds", "When the process started, in seconds since 1970.")
    }

    /// Reads the figures now.
    func update() {
        #if os(Linux)
            let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
            // /proc/self/stat: after the command's closing parenthesis, fields from the 3rd on.
            if let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            {
                let fields = stat[stat.index(after: end)...].split(separator: " ")
                // utime, stime (14th, 15th), starttime (22nd): indices from the 3rd field.
                if fields.count > 19, let user = Double(fields[11]), let system = Double(fields[12]), ticks > 0 {
                    let spent = (user + system) / ticks
                    cpuShown.withLockedValue { shown in
                        if spent > shown { cpu.increment(by: spent - shown) }
                        shown = max(shown, spent)
                    }
                    if let started = Double(fields[19]), let boot = Self.bootTime() {
                        startTime.set(to: boot + started / ticks)
                    }
                }
            }
            if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
                let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Double($0) })
            {
                resident.set(to: pages * Double(sysconf(Int32(_SC_PAGESIZE))))
            }
            if let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
                // The listing's own descriptor is among them.
                openFiles.set(to: Double(max(0, descriptors.count - 1)))
            }
            var limit = rlimit()
            if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 { maxFiles.set(to: Double(limit.rlim_cur)) }
        #endif
    }

    /// When the machine booted, in seconds since 1970 (`/proc/stat` `btime`).
    private static func bootTime() -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        return stat.split(separator: "\n").first { $0.hasPrefix("btime ") }.flatMap { Double($0.dropFirst(6)) }
    }
}

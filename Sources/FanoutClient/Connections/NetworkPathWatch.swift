#if canImport(Network)
    import Dispatch
    import Network

    /// The device's network path (`NWPathMonitor`), calling `onSatisfied` each time it becomes
    /// usable: a `RemoteCartStore` waiting before its next attempt then tries at once.
    final class NetworkPathWatch: @unchecked Sendable {  // NWPathMonitor is used from its queue and `cancel` only.
        private let monitor = NWPathMonitor()

        init(onSatisfied: @escaping @Sendable () -> Void) {
            monitor.pathUpdateHandler = { path in
                if path.status == .satisfied { onSatisfied() }
            }
            monitor.start(queue: DispatchQueue(label: "fanout.network-path"))
        }

        func cancel() { monitor.cancel() }
    }
#endif

import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A writer of mutations over HTTP.
public enum Mutations {
    /// Adds a line; returns the event seq on a 2xx, nil otherwise (server down, refused).
    public static func add(port: Int, cart: String, sku: String) async -> Int64? {
        await send(port: port, "POST", "/carts/\(cart)/items", body: #"{"sku":"\#(sku)","quantity":1,"unitPriceCents":10}"#)
    }

    /// Sends a change, with the bearer `token` when given; returns the event seq on a 2xx, nil
    /// otherwise (server down, refused).
    public static func send(port: Int, _ method: String, _ path: String, body: String? = nil, token: String? = nil) async -> Int64? {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = 5
        request.httpBody = body.map { Data($0.utf8) }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        guard let (data, response) = try? await URLSession.shared.data(for: request),
            let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { return nil }
        return (object["seq"] as? NSNumber)?.int64Value
    }

    /// `writers` concurrent writers, `each` mutations each; returns the seqs that got a 2xx.
    public static func burst(port: @escaping @Sendable () -> Int, writers: Int, each: Int, tag: String) async -> [Int64] {
        await withTaskGroup(of: [Int64].self) { group in
            for writer in 0..<writers {
                group.addTask {
                    var acknowledged: [Int64] = []
                    for index in 0..<each {
                        if let seq = await add(port: port(), cart: "\(tag)\(writer)", sku: "s\(index)") { acknowledged.append(seq) }
                    }
                    return acknowledged
                }
            }
            var all: [Int64] = []
            for await part in group { all += part }
            return all.sorted()
        }
    }

    /// A temporary folder's `db.sqlite`, and how to remove the folder.
    public static func temporaryDatabase() throws -> (path: String, cleanup: @Sendable () -> Void) {
        let directory = FileManager.default.temporaryDirectory.appending(path: "fanout-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return (directory.appending(path: "db.sqlite").path, { try? FileManager.default.removeItem(at: directory) })
    }

    /// Every event seq in the log, through `GET /events`.
    public static func log(port: Int) async throws -> [Int64] {
        var seqs: [Int64] = []
        while true {
            let url = URL(string: "http://127.0.0.1:\(port)/events?since=\(seqs.last ?? 0)&limit=1000")!
            let (data, _) = try await URLSession.shared.data(from: url)
            let object = (try JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
            let page = (object["events"] as? [[String: Any]] ?? []).compactMap { ($0["seq"] as? NSNumber)?.int64Value }
            if page.isEmpty { return seqs }
            seqs += page
        }
    }
}

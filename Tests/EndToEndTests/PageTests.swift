import FanoutTestSupport
import Foundation
import HummingbirdWSClient
import Logging
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The live cart page (`GET /`) in a real headless Chromium, against the real `fanout-server`:
/// what a person with the page open sees when carts change, and when the server restarts.
///
/// Needs Chromium (`apt-get install chromium`; `.ci/run` installs it). Without it these tests
/// are skipped, saying so, except in CI (`CI` set), where they fail.
@Suite(
    "The page (headless Chromium)", .tags(.processes, .browser), .outsideTheFastSet, .serialized, .timeLimit(.minutes(3)),
    .enabled(if: HeadlessChromium.executable != nil || runningInCI, "apt-get install chromium enables the page tests"))
struct PageTests {
    typealias Line = SeenOnPage.Line
    typealias Viewer = SeenOnPage.Viewer

    @Test func thePageShowsEveryChangeAndComesBackByItselfAfterARestart() async throws {
        let executable = try #require(HeadlessChromium.executable, "chromium is not installed: apt-get install chromium")
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let token = "page-\(UUID().uuidString)"
        let serverArguments = ["--db", database, "--token", token, "--heartbeat-interval", "1"]
        let first = try await ServerProcess(arguments: ["--port", "0"] + serverArguments)
        let port = first.port
        /// A change over HTTP, as another client makes it; returns its seq.
        let change: (String, String, String?) async throws -> Int64 = { method, path, body in
            try #require(await Mutations.send(port: port, method, path, body: body, token: token), "\(method) \(path)")
        }
        // Carts before the page opens: they come in its snapshot.
        for (cart, sku, quantity, cents, name) in PageTests.seed {
            _ = try await change(
                "POST", "/carts/\(cart)/items", #"{"sku":"\#(sku)","quantity":\#(quantity),"unitPriceCents":\#(cents),"name":"\#(name)"}"#)
        }

        let browser = try await HeadlessChromium(executable: executable)
        let devTools = DevTools(url: try await browser.devToolsURL())
        let page = try await devTools.open("http://127.0.0.1:\(port)/?token=\(token)")
        var seen = try await page.waitFor("the snapshot") { $0.state == "live" && $0.carts.count == 5 }
        #expect(seen.carts.map(\.id) == ["alice", "bob", "carol", "dave", "erin"], "every cart, by id")
        #expect(seen.lines("alice") == [Line("apple", 3), Line("bread", 1)])
        #expect(seen.cart("alice")?.total == "6.10", "3 × 1.20 + 2.50")
        #expect(seen.seq == "\(PageTests.seed.count)")

        // Changes over HTTP, each on the page within the deadline.
        _ = try await change("POST", "/carts/bob/items", #"{"sku":"banana","quantity":2,"unitPriceCents":35}"#)
        seen = try await page.waitFor("bob's bananas") { $0.lines("bob")?.contains(Line("banana", 2)) == true }
        let setSeq = try await change("PATCH", "/carts/alice/items/apple", #"{"quantity":5}"#)
        seen = try await page.waitFor("alice's 5 apples") { $0.lines("alice")?.first == Line("apple", 5) }
        #expect(seen.seq == "\(setSeq)")
        #expect(seen.cart("alice")?.total == "8.50")
        _ = try await change("DELETE", "/carts/carol/items/cheese", nil)
        seen = try await page.waitFor("carol's cheese removed") { $0.lines("carol")?.contains { $0.sku == "cheese" } == false }
        _ = try await change("POST", "/carts/frank/items", #"{"sku":"fig","quantity":1,"unitPriceCents":90}"#)
        seen = try await page.waitFor("frank's new cart") { $0.lines("frank") == [Line("fig", 1)] }
        #expect(seen.carts.map(\.id) == ["alice", "bob", "carol", "dave", "erin", "frank"], "a new cart takes its place by id")

        // Changes through the page: its form, and a line's + button. Each shows deliveredTo (the
        // page's own stream is a subscriber).
        try await page.run(
            """
            const form = document.getElementById('change');
            form.cart.value = 'gina'; form.sku.value = 'grapes'; form.quantity.value = '2'; form.price.value = '3.10';
            form.name.value = 'Grapes <b>red</b>';
            form.requestSubmit(form.querySelector('button[value=add]'))
            """)
        seen = try await page.waitFor("the form's change and its deliveredTo") {
            $0.deliveredTo != nil && $0.lines("gina") == [Line("grapes", 2)]
        }
        #expect(seen.deliveredTo == "1", "\(seen.result)")
        #expect(seen.result.contains("delivered to 1 subscriber"), "\(seen.result)")
        #expect(seen.names("gina") == ["Grapes <b>red</b>"], "a name is shown as text, never as markup")
        try await page.run(#"document.querySelector('[data-cart="alice"] tr[data-sku="apple"] [data-action=inc]').click()"#)
        seen = try await page.waitFor("alice's apple + 1") { $0.lines("alice")?.first == Line("apple", 6) }
        #expect(seen.cart("alice")?.version == 4, "2 adds, a set, the +")
        // A change the server refuses: its error where the result goes, nothing changed.
        try await page.run(
            """
            const form = document.getElementById('change');
            form.cart.value = 'gina'; form.sku.value = 'guava'; form.quantity.value = '3';
            form.requestSubmit(form.querySelector('button[value=set]'))
            """)
        seen = try await page.waitFor("the refusal") { $0.result.contains("404") }
        #expect(seen.result.contains("item_not_found"), "\(seen.result)")
        #expect(seen.deliveredTo == nil)
        #expect(seen.lines("gina") == [Line("grapes", 2)])
        // A name with a right-to-left override: shown as a visible code, so it cannot reorder
        // the text around it.
        _ = try await change("POST", "/carts/ivan/items", #"{"sku":"x","quantity":1,"unitPriceCents":1,"name":"abc\u202Edef"}"#)
        seen = try await page.waitFor("ivan's line") { $0.names("ivan")?.isEmpty == false }
        #expect(seen.names("ivan") == ["abc\u{27E8}U+202E\u{27E9}def"])

        // The server stops: the page says so. It restarts on the same database and port: the
        // page comes back by itself and resumes after its last seq.
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        seen = try await page.waitFor("the page to notice") { $0.state == "reconnecting" }
        let second = try await ServerProcess(arguments: ["--port", "\(port)"] + serverArguments)
        let restarted = ContinuousClock.now
        seen = try await page.waitFor(timeout: .seconds(20), "the page to reconnect") { $0.state == "live" }
        let reconnect = ContinuousClock.now - restarted
        print("the page was live again \(Int(reconnect / .milliseconds(1))) ms after the server restarted")
        _ = try await change("POST", "/carts/alice/items", #"{"sku":"pear","quantity":1,"unitPriceCents":80}"#)
        _ = try await change("PATCH", "/carts/bob/items/banana", #"{"quantity":7}"#)
        let lastSeq = try await change("POST", "/carts/henry/items", #"{"sku":"honey","quantity":1,"unitPriceCents":650}"#)
        seen = try await page.waitFor("the changes after the restart") { $0.seq == "\(lastSeq)" }
        #expect(seen.lines("alice") == [Line("apple", 6), Line("bread", 1), Line("pear", 1)])
        #expect(seen.lines("bob")?.contains(Line("banana", 7)) == true)
        for cart in seen.carts {
            #expect(Set(cart.lines.map(\.sku)).count == cart.lines.count, "a line shown twice in \(cart.id): \(cart.lines)")
        }
        #expect(Set(seen.feed).count == seen.feed.count, "an event in the feed twice: \(seen.feed)")
        #expect(seen.state == "live", "a resume, not a snapshot")
        // Changes through the page still work, and its new stream is the one delivered to.
        try await page.run(#"document.querySelector('[data-cart="henry"] tr[data-sku="honey"] [data-action=inc]').click()"#)
        seen = try await page.waitFor("henry's honey + 1") {
            $0.lines("henry") == [Line("honey", 2)] && $0.result.contains("seq \(lastSeq + 1)")
        }
        #expect(seen.deliveredTo == "1", "\(seen.result)")
        // What the page shows is what the server has, cart by cart.
        let carts = try await PageTests.carts(port: port, token: token)
        #expect(seen.carts.map(\.id) == carts.map(\.id))
        for cart in carts {
            #expect(seen.cart(cart.id)?.version == cart.version, "\(cart.id)'s version")
            #expect(seen.lines(cart.id) == cart.items.map { Line($0.sku, $0.quantity) }, "\(cart.id)'s lines")
        }

        // For a person to judge the design: light, then dark.
        try await page.run("window.scrollTo(0, 0); document.activeElement?.blur()")
        for (scheme, name) in [("light", "page.png"), ("dark", "page-dark.png")] {
            try await page.emulateColorScheme(scheme)
            let png = try await page.screenshot()
            let file = PageTests.artifacts.appending(path: name)
            try FileManager.default.createDirectory(at: PageTests.artifacts, withIntermediateDirectories: true)
            try png.write(to: file)
            print("screenshot (\(scheme)): \(file.path)")
        }

        await devTools.close()
        await browser.stop()
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
    }

    /// A store of 1 200 carts: the snapshot comes in three parts and the page shows them all, a
    /// burst of changes reaches it, and a server on another database makes it start over.
    @Test func aThousandCartsAndABurstAndAnotherDatabase() async throws {
        let executable = try #require(HeadlessChromium.executable, "chromium is not installed: apt-get install chromium")
        let (database, cleanup) = try await EndToEndTests.temporaryDatabase(carts: 1_200)
        defer { cleanup() }
        let first = try await ServerProcess(arguments: ["--port", "0", "--db", database])
        let port = first.port

        let browser = try await HeadlessChromium(executable: executable)
        let devTools = DevTools(url: try await browser.devToolsURL())
        let opened = ContinuousClock.now
        let page = try await devTools.open("http://127.0.0.1:\(port)/")
        var seen = try await page.waitFor(timeout: .seconds(30), "1 200 carts") { $0.carts.count == 1_200 }
        print("1 200 carts shown \(Int((ContinuousClock.now - opened) / .milliseconds(1))) ms after the page was opened")
        #expect(seen.state == "live")
        #expect(seen.seq == "1200")
        #expect(seen.lines("w0") == [Line("s0", 1)] && seen.lines("w1199") == [Line("s0", 1)])

        let burstStarted = ContinuousClock.now
        let acknowledged = await Mutations.burst(port: { port }, writers: 4, each: 100, tag: "w")
        #expect(acknowledged.count == 400)
        seen = try await page.waitFor(timeout: .seconds(30), "the burst") { $0.seq == "1600" }
        print("a burst of 400 changes shown \(Int((ContinuousClock.now - burstStarted) / .milliseconds(1))) ms after it began")
        #expect(seen.carts.count == 1_200)
        #expect(seen.lines("w3")?.count == 100, "s0…s99, s0 added to a second time")
        #expect(seen.lines("w3")?.first == Line("s0", 2))

        // Another database behind the same address: the page's seq is ahead of its log, so it
        // gets a snapshot and replaces what it showed.
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        let (other, cleanupOther) = try EndToEndTests.temporaryDatabase()
        defer { cleanupOther() }
        let second = try await ServerProcess(arguments: ["--port", "\(port)", "--db", other])
        seen = try await page.waitFor(timeout: .seconds(20), "the resync") { $0.state == "resynced" && $0.carts.isEmpty }
        #expect(seen.seq == "0", "the other database's seq")
        #expect(await Mutations.add(port: port, cart: "fresh", sku: "start") == 1)
        seen = try await page.waitFor("the first change there") { $0.seq == "1" }
        #expect(seen.carts.map(\.id) == ["fresh"])

        await devTools.close()
        await browser.stop()
        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
    }

    /// The page over `https://`: served by the server itself (`--tls-cert`), and by nginx ending
    /// TLS in front of it (`deploy/nginx-fanout.conf`). Each streams (`EventSource` over TLS)
    /// and changes a cart through its form: its `https://` origin is the server's own, in the
    /// clear behind the proxy too.
    @Test func thePageWorksOverTLSAndBehindTheRecipesProxy() async throws {
        let executable = try #require(HeadlessChromium.executable, "chromium is not installed: apt-get install chromium")
        let certificate = try await TestCertificate.make()
        defer { certificate.remove() }
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let direct = try await ServerProcess(arguments: [
            "--port", "0", "--db", database, "--tls-cert", certificate.certificate.path, "--tls-key", certificate.key.path,
        ])
        let (behindDatabase, behindCleanup) = try EndToEndTests.temporaryDatabase()
        defer { behindCleanup() }
        let behind = try await ServerProcess(arguments: ["--port", "0", "--db", behindDatabase])
        let hasNginx = FileManager.default.isExecutableFile(atPath: NginxProxy.executable.path)
        if !hasNginx {
            if runningInCI { Issue.record("nginx is missing (apt-get install nginx-light)") }
            print("the page behind nginx is skipped: apt-get install nginx-light enables it")
        }
        let proxy = hasNginx ? try await NginxProxy(upstream: behind.port, certificate: certificate) : nil
        // Chromium trusts this certificate alone (its public key), as a person would add it.
        let browser = try await HeadlessChromium(
            executable: executable, arguments: ["--ignore-certificate-errors-spki-list=\(try await certificate.publicKeyHash())"])
        let devTools = DevTools(url: try await browser.devToolsURL())
        for url in [direct.url] + (proxy.map { [$0.url] } ?? []) {
            let page = try await devTools.open(url.absoluteString + "/")
            _ = try await page.waitFor("\(url): live") { $0.state == "live" }
            try await page.run(
                """
                const form = document.getElementById('change');
                form.cart.value = 'tess'; form.sku.value = 'tea'; form.quantity.value = '2'; form.price.value = '4.50';
                form.requestSubmit(form.querySelector('button[value=add]'))
                """)
            let seen = try await page.waitFor("\(url): its change, streamed back") {
                $0.lines("tess") == [Line("tea", 2)] && $0.deliveredTo != nil
            }
            #expect(seen.deliveredTo == "1", "\(url): \(seen.result)")
        }
        await devTools.close()
        await browser.stop()
        await proxy?.stop()
        for server in [direct, behind] {
            server.signal(SIGTERM)
            #expect(await server.waitForExit() == 0)
        }
    }

    /// `/?token=JWT`: the page shows only that user's carts, and offers changes only when her
    /// token has the write scope.
    @Test func aSignedTokensPageShowsOnlyItsCartsAndChangesOnlyWithWrite() async throws {
        let executable = try #require(HeadlessChromium.executable, "chromium is not installed: apt-get install chromium")
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let operatorToken = SignedTokenEndToEndTests.operatorToken
        let server = try await SignedTokenEndToEndTests.server(database)
        let port = server.port
        for (cart, sku, quantity, cents, name) in PageTests.seed {
            let body = #"{"sku":"\#(sku)","quantity":\#(quantity),"unitPriceCents":\#(cents),"name":"\#(name)"}"#
            #expect(await Mutations.send(port: port, "POST", "/carts/\(cart)/items", body: body, token: operatorToken) != nil)
        }
        let reader = try await SignedTokenEndToEndTests.mint(["--sub", "alice", "--carts", "alice,carol", "--scope", "read"])
        let writer = try await SignedTokenEndToEndTests.mint(["--sub", "bob", "--carts", "bob", "--scope", "read write"])
        let browser = try await HeadlessChromium(executable: executable)
        let devTools = DevTools(url: try await browser.devToolsURL())
        /// Whether the page offers changes: its form, and a line's buttons, are shown.
        let offersChanges =
            "getComputedStyle(document.getElementById('change-panel')).display !== 'none'"
            + " && getComputedStyle(document.querySelector('.cart [data-action=inc]')).display !== 'none'"

        let alices = try await devTools.open("http://127.0.0.1:\(port)/?token=\(reader)")
        var seen = try await alices.waitFor("her snapshot") { $0.state == "live" && !$0.carts.isEmpty }
        #expect(seen.carts.map(\.id) == ["alice", "carol"])
        #expect(try await alices.evaluate(offersChanges, as: Bool.self) == false, "read only: no change offered")
        #expect(try await alices.evaluate("document.getElementById('who').textContent", as: String.self) == "carts of alice · read only")
        let bobs = try await devTools.open("http://127.0.0.1:\(port)/?token=\(writer)")
        seen = try await bobs.waitFor("his snapshot") { $0.state == "live" && !$0.carts.isEmpty }
        #expect(seen.carts.map(\.id) == ["bob"])
        #expect(try await bobs.evaluate(offersChanges, as: Bool.self) == true)
        // His change through the page reaches his page, and neither reaches hers.
        try await bobs.run(#"document.querySelector('[data-cart="bob"] tr[data-sku="butter"] [data-action=inc]').click()"#)
        seen = try await bobs.waitFor("bob's butter + 1") { $0.lines("bob") == [Line("butter", 2)] }
        let carolsSeq = try #require(
            await Mutations.send(
                port: port, "POST", "/carts/carol/items", body: #"{"sku":"cider","quantity":1,"unitPriceCents":300}"#, token: operatorToken)
        )
        seen = try await alices.waitFor("carol's cider") { $0.lines("carol")?.contains(Line("cider", 1)) == true }
        #expect(seen.seq == "\(carolsSeq)")
        #expect(seen.carts.map(\.id) == ["alice", "carol"], "bob's change is not on her page")

        await devTools.close()
        await browser.stop()
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// `/?carts=a`, and a signed token's page: each is present on its carts and shows who else is
    /// looking, per user, with their state, live as they come and go.
    @Test func thePageShowsWhoIsLookingAtItsCarts() async throws {
        let executable = try #require(HeadlessChromium.executable, "chromium is not installed: apt-get install chromium")
        let (database, cleanup) = try EndToEndTests.temporaryDatabase()
        defer { cleanup() }
        let bob = try await SignedTokenEndToEndTests.mint(["--sub", "bob", "--carts", "a", "--scope", "read"])
        let operatorToken = SignedTokenEndToEndTests.operatorToken
        let server = try await SignedTokenEndToEndTests.server(database)
        let port = server.port
        let browser = try await HeadlessChromium(executable: executable)
        let devTools = DevTools(url: try await browser.devToolsURL())

        // The operator's page names cart a: it shows it before it has a line, with itself looking.
        let mine = try await devTools.open("http://127.0.0.1:\(port)/?token=\(operatorToken)&carts=a")
        var seen = try await mine.waitFor("itself on a") { $0.viewers("a") == [Viewer("", you: true)] }
        #expect(seen.carts.map(\.id) == ["a"])
        // Bob's page: his token's claim names a, so it is present there too, as bob.
        let bobsPage = try await devTools.open("http://127.0.0.1:\(port)/?token=\(bob)")
        seen = try await mine.waitFor("bob looking") { $0.viewers("a") == [Viewer("", you: true), Viewer("bob")] }
        seen = try await bobsPage.waitFor("bob's page: both") { $0.viewers("a") == [Viewer("", you: false), Viewer("bob", you: true)] }
        #expect(seen.viewers("a")?.last?.text == "bobyou")

        // Bob on a second device, editing, with a right-to-left override in his state.
        let device = PresentSubscriber(
            url: "ws://127.0.0.1:\(port)/subscribe?token=\(bob)",
            subscribe:
                #"{"type":"subscribe","carts":["a"],"presence":{"key":"bobs-phone","state":{"editing":true,"screen":"abc\u202Edef"}}}"#)
        seen = try await mine.waitFor("bob twice") { $0.viewers("a")?.last?.count == 2 }
        let twice = seen.viewers("a")?.last
        #expect(twice?.user == "bob" && twice?.you == false)
        #expect(twice?.state == "editing, screen: abc\u{27E8}U+202E\u{27E9}def", "a state's simple fields, its controls shown as codes")
        #expect(twice?.text.hasPrefix("bob ×2") == true, "\(twice?.text ?? "")")
        // For a person to judge the design.
        let file = PageTests.artifacts.appending(path: "page-presence.png")
        try FileManager.default.createDirectory(at: PageTests.artifacts, withIntermediateDirectories: true)
        try await mine.screenshot().write(to: file)
        print("screenshot: \(file.path)")

        // He leaves, device by device: the page follows at once.
        await device.close()
        seen = try await mine.waitFor("bob once again") { $0.viewers("a") == [Viewer("", you: true), Viewer("bob")] }
        #expect(seen.viewers("a")?.last?.state == "")
        try await bobsPage.close()
        seen = try await mine.waitFor("bob gone") { $0.viewers("a") == [Viewer("", you: true)] }
        #expect(seen.cart("a")?.members == 1)

        // A reload of the page keeps its key: it is the same member, and "you" again.
        let key = try await mine.evaluate("me.key", as: String.self)
        try await mine.run("window.beforeReload = true; location.reload()")
        let deadline = ContinuousClock.now + .seconds(10)
        while (try? await mine.evaluate("window.beforeReload === undefined && document.readyState === 'complete'", as: Bool.self)) != true {
            guard ContinuousClock.now < deadline else { throw DevToolsError(message: "the page did not reload") }
            try await Task.sleep(for: .milliseconds(20))
        }
        seen = try await mine.waitFor("the reloaded page") { $0.state == "live" && $0.viewers("a") == [Viewer("", you: true)] }
        #expect(try await mine.evaluate("me.key", as: String.self) == key)

        // A page without named carts asks for no presence, and shows none.
        let everything = try await devTools.open("http://127.0.0.1:\(port)/?token=\(operatorToken)")
        _ = try await everything.waitFor("its snapshot") { $0.state == "live" }
        #expect(try await everything.evaluate("document.querySelectorAll('.viewers').length", as: Int.self) == 0)
        #expect(try await PageTests.presence(of: "a", port: port, token: operatorToken) == 1, "only the page that names a")

        await devTools.close()
        await browser.stop()
        server.signal(SIGTERM)
        #expect(await server.waitForExit() == 0)
    }

    /// A WebSocket subscriber present on its carts until `close()`: another device of a user.
    /// It reads nothing: the test is over long before its lease.
    final class PresentSubscriber: Sendable {
        private let closing = AsyncStream<Void>.makeStream()
        private let connection: Task<Void, any Error>

        init(url: String, subscribe: String) {
            let closed = closing.stream
            connection = Task {
                var configuration = WebSocketClientConfiguration()
                configuration.closeTimeout = .seconds(1)
                var logger = Logger(label: "present-subscriber")
                logger.logLevel = .critical
                _ = try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { _, outbound, _ in
                    try await outbound.write(.text(subscribe))
                    for await _ in closed {}
                }
            }
        }

        /// Closes the WebSocket, and waits until it is closed.
        func close() async {
            closing.continuation.finish()
            _ = try? await connection.value
        }
    }

    /// (cart, sku, quantity, unit price in cents, name) of the carts there before the page opens.
    static let seed: [(String, String, Int, Int, String)] = [
        ("alice", "apple", 3, 120, "Apples"), ("alice", "bread", 1, 250, "Sourdough bread"),
        ("bob", "butter", 1, 310, "Butter"), ("carol", "cheese", 2, 475, "Comté"),
        ("carol", "crackers", 1, 199, "Crackers"), ("dave", "dates", 4, 99, "Medjool dates"),
        ("erin", "eggs", 12, 42, "Eggs"),
    ]

    /// Where a test run leaves what a person looks at afterwards: `.build/artifacts/`.
    static let artifacts = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appending(path: ".build/artifacts")

    struct ServerCart: Decodable {
        struct Item: Decodable {
            var sku: String
            var quantity: Int
        }
        var id: String
        var version: Int64
        var items: [Item]
    }

    /// How many members `GET /carts/{id}/presence` counts.
    static func presence(of cart: String, port: Int, token: String) async throws -> Int {
        struct Answer: Decodable {
            struct Member: Decodable { var member: String }
            var members: [Member]
        }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/carts/\(cart)/presence")!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONDecoder().decode(Answer.self, from: data).members.count
    }

    /// `GET /carts`, as the server has them.
    static func carts(port: Int, token: String) async throws -> [ServerCart] {
        struct Answer: Decodable { var carts: [ServerCart] }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/carts")!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONDecoder().decode(Answer.self, from: data).carts.sorted { $0.id < $1.id }
    }
}

/// What a person sees on the page, read from its DOM.
struct SeenOnPage: Decodable {
    struct Line: Decodable, Equatable, CustomStringConvertible {
        var sku: String
        var quantity: Int
        init(_ sku: String, _ quantity: Int) {
            self.sku = sku
            self.quantity = quantity
        }
        var description: String { "\(sku)×\(quantity)" }
    }

    /// A chip of who is looking at a cart: a user (`""` for the anonymous ones), how many of
    /// their tabs or devices, their state's simple fields, whether it is this page.
    struct Viewer: Decodable, Equatable, CustomStringConvertible {
        var user: String
        var count: Int
        var you: Bool
        var state: String
        var text: String
        init(_ user: String, count: Int = 1, you: Bool = false) {
            self.user = user
            self.count = count
            self.you = you
            self.state = ""
            self.text = ""
        }
        /// What the tests compare: who, how many, whether it is this page.
        static func == (lhs: Self, rhs: Self) -> Bool { (lhs.user, lhs.count, lhs.you) == (rhs.user, rhs.count, rhs.you) }
        var description: String { "\(user.isEmpty ? "anonymous" : user)×\(count)\(you ? " (you)" : "")" }
    }

    struct Cart: Decodable {
        var id: String
        var version: Int64
        var total: String
        var lines: [Line]
        var names: [String]
        /// Who is looking, when the page shows it (nil: it does not).
        var viewers: [Viewer]?
        var members: Int?
    }

    /// The connection badge: connecting, live, reconnecting, resynced, refused.
    var state: String
    /// The last seq, as shown.
    var seq: String
    var carts: [Cart]
    /// The answer to the page's last change, and its `deliveredTo` once one succeeded.
    var result: String
    var deliveredTo: String?
    /// The seqs of the events in the feed, newest first.
    var feed: [String]

    func cart(_ id: String) -> Cart? { carts.first { $0.id == id } }
    func lines(_ id: String) -> [Line]? { cart(id)?.lines }
    func names(_ id: String) -> [String]? { cart(id)?.names }
    func viewers(_ id: String) -> [Viewer]? { cart(id)?.viewers }

    static let expression = """
        (() => {
          const text = (node) => node ? node.textContent : '';
          return {
            state: document.getElementById('state').dataset.state,
            seq: text(document.getElementById('seq')),
            carts: [...document.querySelectorAll('#carts [data-cart]')].map((card) => ({
              id: card.dataset.cart,
              version: Number(card.dataset.version),
              total: text(card.querySelector('.total')),
              lines: [...card.querySelectorAll('tr[data-sku]')].map((row) => ({ sku: row.dataset.sku, quantity: Number(text(row.querySelector('.n'))) })),
              names: [...card.querySelectorAll('.name')].map(text),
              viewers: card.querySelector('.viewers') ? [...card.querySelectorAll('.viewer')].map((chip) => ({
                user: chip.dataset.user, count: Number(chip.dataset.count), you: chip.classList.contains('you'),
                state: text(chip.querySelector('.viewer-state')), text: text(chip),
              })) : null,
              members: card.querySelector('.viewers') ? Number(card.querySelector('.viewers').dataset.members) : null,
            })),
            result: text(document.getElementById('result')),
            deliveredTo: document.getElementById('result').dataset.deliveredTo ?? null,
            feed: [...document.querySelectorAll('#feed li.event')].map((item) => item.dataset.seq),
          };
        })()
        """
}

extension BrowserPage {
    func seen() async throws -> SeenOnPage {
        try await evaluate(SeenOnPage.expression)
    }

    /// Polls the page until `condition` holds, up to `timeout`; returns what it shows then, and
    /// records what it showed last when the deadline passed.
    @discardableResult
    func waitFor(
        timeout: Duration = .seconds(10), _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: (SeenOnPage) -> Bool
    ) async throws -> SeenOnPage {
        let deadline = ContinuousClock.now + timeout
        var last = try await seen()
        while !condition(last) {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting for \(what); the page shows: \(last)", sourceLocation: sourceLocation)
                throw DevToolsError(message: "timed out waiting for \(what)")
            }
            try await Task.sleep(for: .milliseconds(20))
            last = try await seen()
        }
        return last
    }
}

import ArgumentParser
import FanoutClient
import FanoutProtocol
import Foundation

/// `fanout-client cart …`: the HTTP cart API from a terminal.
struct CartCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cart",
        abstract: "Read and change carts over HTTP.",
        discussion: """
            Examples:
              fanout-client cart list
              fanout-client cart add alice apple --quantity 2 --price 50 --name "Green apple"
              fanout-client cart set alice apple 5
            """,
        subcommands: [List.self, Show.self, Add.self, Set.self, Remove.self, Clear.self])

    /// Checks the values a command names before asking the server: the same rule, message and
    /// exit status (64) for every command (and for `subscribe`'s carts).
    static func check(cart: String? = nil, sku: String? = nil, quantity: Int? = nil, allowZero: Bool = false, price: Int? = nil) throws {
        do throws(FanoutError) {
            if let cart { try CartLimits.checkCartID(cart) }
            if let sku { try CartLimits.checkSKU(sku) }
            if let quantity { try CartLimits.checkQuantity(quantity, allowZero: allowZero) }
            if let price { try CartLimits.checkPrice(price) }
        } catch {
            // The API's field, as the command line names it.
            throw ValidationError(error.message.replacingOccurrences(of: "unitPriceCents", with: "--price (cents)"))
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List every cart.", discussion: "Example: fanout-client cart list")
        @OptionGroup var connection: ServerConnection

        func run() async throws {
            let answer = try await connection.api().carts()
            if answer.carts.isEmpty { print("no carts (seq \(answer.seq))") }
            for cart in answer.carts { print(CartText.summary(cart)) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one cart.", discussion: "Example: fanout-client cart show alice")
        @OptionGroup var connection: ServerConnection
        @Argument(help: "Cart id.") var cartID: String

        func validate() throws { try CartCommand.check(cart: cartID) }

        func run() async throws {
            let answer = try await connection.api().cart(cartID)
            print(CartText.detail(answer.cart, seq: answer.seq))
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an item (or more of it) to a cart.",
            discussion: "Example: fanout-client cart add alice apple --quantity 2 --price 50 --name Apple")
        @OptionGroup var connection: ServerConnection
        @Argument(help: "Cart id.") var cartID: String
        @Argument(help: "Item sku.") var sku: String
        // Unconditional: `--price -5` reads -5, refused below as a price, not "missing value".
        @Option(parsing: .unconditional, help: "How many to add (1…10000).") var quantity: Int
        @Option(parsing: .unconditional, help: "Unit price in cents (0…1000000000).") var price: Int
        @Option(help: "Display name.") var name: String?

        func validate() throws { try CartCommand.check(cart: cartID, sku: sku, quantity: quantity, price: price) }

        func run() async throws {
            print(
                CartText.mutation(
                    try await connection.api().addItem(sku, quantity: quantity, unitPriceCents: price, name: name, to: cartID)))
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set the quantity of an item (0 removes it).", discussion: "Example: fanout-client cart set alice apple 5")
        @OptionGroup var connection: ServerConnection
        @Argument(help: "Cart id.") var cartID: String
        @Argument(help: "Item sku.") var sku: String
        @Argument(help: "New quantity (0…10000).") var quantity: Int

        func validate() throws { try CartCommand.check(cart: cartID, sku: sku, quantity: quantity, allowZero: true) }

        func run() async throws {
            print(CartText.mutation(try await connection.api().setQuantity(of: sku, to: quantity, in: cartID)))
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove an item from a cart.", discussion: "Example: fanout-client cart remove alice apple")
        @OptionGroup var connection: ServerConnection
        @Argument(help: "Cart id.") var cartID: String
        @Argument(help: "Item sku.") var sku: String

        func validate() throws { try CartCommand.check(cart: cartID, sku: sku) }

        func run() async throws {
            print(CartText.mutation(try await connection.api().removeItem(sku, from: cartID)))
        }
    }

    struct Clear: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove every item of a cart.", discussion: "Example: fanout-client cart clear alice")
        @OptionGroup var connection: ServerConnection
        @Argument(help: "Cart id.") var cartID: String

        func validate() throws { try CartCommand.check(cart: cartID) }

        func run() async throws {
            print(CartText.mutation(try await connection.api().clear(cartID)))
        }
    }
}

/// How carts read in a terminal.
enum CartText {
    static func money(_ cents: some BinaryInteger) -> String {
        let cents = Int64(cents)
        return String(format: "%lld.%02lld", cents / 100, abs(cents % 100))
    }

    static func summary(_ cart: Cart) -> String {
        "\(cart.id)  v\(cart.version)  \(cart.itemCount) items  \(money(cart.totalCents))"
    }

    static func detail(_ cart: Cart, seq: Int64) -> String {
        var lines = ["\(summary(cart))  (seq \(seq))"]
        for item in cart.items {
            let name = item.name.map { " \($0)" } ?? ""
            lines.append("  \(item.quantity) × \(item.sku)\(name) @ \(money(item.unitPriceCents)) = \(money(item.lineTotalCents))")
        }
        return lines.joined(separator: "\n")
    }

    static func mutation(_ answer: MutationResponse) -> String {
        "\(detail(answer.cart, seq: answer.seq))\nevent seq \(answer.seq), delivered to \(answer.deliveredTo) subscribers"
    }
}

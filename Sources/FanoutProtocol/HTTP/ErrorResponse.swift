/// The body of every error answer: `{"error":{"code","message",…}}`.
///
/// Some errors add whole-number fields next to `code` and `message` (a `history_too_old`
/// answer gives `oldestRetainedSeq` and `latestSeq`); they are `details`.
public struct ErrorResponse: Codable, Sendable, Hashable {
    public var error: Detail

    public init(code: String, message: String, details: [String: Int64] = [:]) {
        error = Detail(code: code, message: message, details: details)
    }

    public init(_ error: FanoutError) {
        self.init(code: error.code.rawValue, message: error.message, details: error.details)
    }

    public struct Detail: Sendable, Hashable {
        /// Stable and machine-readable, like `cart_not_found` (`FanoutErrorCode` lists them;
        /// kept as text so that a newer server's code still decodes).
        public var code: String
        /// For people.
        public var message: String
        public var details: [String: Int64]
    }
}

extension ErrorResponse.Detail: Codable {
    private struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }

        static let code = Key(stringValue: "code")
        static let message = Key(stringValue: "message")
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        code = try container.decode(String.self, forKey: .code)
        message = try container.decode(String.self, forKey: .message)
        details = [:]
        // Fields a newer server adds that are not whole numbers are left out, not refused.
        for key in container.allKeys where key.stringValue != "code" && key.stringValue != "message" {
            if let value = try? container.decode(Int64.self, forKey: key) { details[key.stringValue] = value }
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(code, forKey: .code)
        try container.encode(message, forKey: .message)
        for (key, value) in details where key != "code" && key != "message" {
            try container.encode(value, forKey: Key(stringValue: key))
        }
    }
}

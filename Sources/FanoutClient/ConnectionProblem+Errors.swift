import FanoutProtocol
import Foundation
import NIOConcurrencyHelpers
import Synchronization

extension ConnectionProblem {
    /// What a failed connection attempt or request says, as a problem (a refusal of the
    /// credentials is not one: the subscription reports those as `refused`).
    static func of(_ error: any Error) -> ConnectionProblem {
        switch error {
        case let problem as ConnectionProblem: problem
        case let violation as ProtocolViolation: .protocolViolation(violation.description)
        case RemoteStoreError.unreachable(let why): .unreachable(why)
        case RemoteStoreError.unexpectedAnswer(let why): .protocolViolation(why)
        case RemoteStoreError.refused(_, let code, _, let message, _): .serverError(code, message: message)
        case RemoteStoreError.invalid(let error): .serverError(error.code, message: error.message)
        default: .unreachable("connection lost (\(error))")
        }
    }
}

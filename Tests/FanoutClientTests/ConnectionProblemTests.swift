import FanoutClient
import FanoutProtocol
import Testing

/// What an app branches on when the store reconnects: typed, from the server's own codes.
@Suite("Connection problems")
struct ConnectionProblemTests {
    @Test func aCloseCodeIsTheErrorItStandsFor() {
        for code in FanoutErrorCode.allCases {
            guard let close = code.closeCode else { continue }
            #expect(FanoutErrorCode(closeCode: close) == code, "\(close)")
        }
        #expect(FanoutErrorCode(closeCode: 1000) == nil)
        #expect(FanoutErrorCode(closeCode: 4999) == nil)
    }

    @Test func anAppCanTellATokenThatExpiredFromAServerGoingAwayFromBeingOffline() {
        let expired = ConnectionProblem.endedByServer(closeCode: 4003, code: nil)
        let stopping = ConnectionProblem.endedByServer(closeCode: 1001, code: nil)
        let streamExpired = ConnectionProblem.endedByServer(closeCode: nil, code: .tokenExpired)
        let offline = ConnectionProblem.unreachable("connection refused")
        #expect(expired.isTokenExpired && streamExpired.isTokenExpired && !stopping.isTokenExpired)
        #expect(stopping.isServerGoingAway && !expired.isServerGoingAway)
        #expect(offline.isUnreachable && !offline.isTokenExpired && !expired.isUnreachable)
        #expect(expired.description == "the server ended the subscription (4003 token_expired)")
    }
}

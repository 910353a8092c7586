// Package pgmsg reads and writes the PostgreSQL protocol messages the
// proxy inspects or changes, without allocating: a view is a struct of
// slices into the message body it was read from (valid as long as that
// body), and every writer appends to a caller's buffer.
//
// A Read function checks the whole body and returns ok false for a
// malformed one, which the proxy then passes on unchanged for the server
// (or client) to report, as without the proxy; a view read with ok
// appends back byte for byte (Append). The fuzz targets hold every view
// to that, and to agreeing with pgx's pgproto3 decoder.
//
// # Files
//
//   - frame.go: message type bytes, Split (the first message of a
//     stream), Begin and Finish around a body the
//     caller appends, empty messages, integers and C strings.
//   - Client messages: query.go (Query), parse.go (Parse), bind.go (Bind,
//     and a Bind with parameters appended), describe.go (Describe),
//     close.go (Close), execute.go (Execute).
//   - Server messages: commandcomplete.go (CommandComplete),
//     paramdesc.go (ParameterDescription), fields.go (ErrorResponse and
//     NoticeResponse fields), ready.go (ReadyForQuery), paramstatus.go
//     (ParameterStatus), datarow.go (DataRow), rowdesc.go
//     (RowDescription).
//   - values.go: the value lists of Bind and DataRow, and int8 values.
//
// Tests: client_test.go and server_test.go (a fuzz target per message,
// seeds in testdata/fuzz), build_test.go (the rewritten Bind against
// pgproto3's encoding, malformed bodies, no allocations).
//
// The startup packets and the authentication exchange are not here: they
// are read before the session's framing starts (wire/startup.go,
// wire/auth.go).
package pgmsg

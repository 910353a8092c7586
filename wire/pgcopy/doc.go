// Package pgcopy rewrites the data of a COPY ... FROM STDIN as it is
// relayed: every row gets generated IDs appended as extra fields, for
// columns the proxy added to the statement's column list
// (docs/architecture.md, "How IDs are made"). It imports nothing of the
// project and does no I/O: wire feeds it the bodies of CopyData messages,
// split wherever the client split them, and sends what it returns.
//
//   - rewriter.go: Options, IDs and Rewriter: the stream's state between
//     messages, the text and csv formats (lines, fields, quotes, escapes,
//     the header line and the end-of-data marker).
//   - binary.go: the binary format (header, tuples, trailer).
//
// Rows are recognised exactly as the server's COPY reads them, so that
// what the server sees differs from the client's data only by the
// appended fields: the same line numbers, and the same errors for rows it
// refuses. A row with fewer fields than the client's column list gets no
// ID (the server then reports the first missing column, as without the
// proxy); a row with more gets them (the server reports the extra data).
// Data the rewriter cannot follow (a binary header that is not one, the
// end-of-data marker) is passed on unchanged from there: the server
// judges it. The input is untrusted: nothing in it may make the rewriter
// panic or hold more than a few bytes between messages (fuzz_test.go).
package pgcopy

package pgmsg

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// encoded returns the body of msg as pgproto3 encodes it: seeds written by
// an independent encoder.
func encoded(tb testing.TB, msg pgproto3.Message) []byte {
	b, err := msg.Encode(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return b[HeaderSize:]
}

// checkRoundTrip checks that a view read from body appends the message
// typ+body exactly, and appends after existing bytes without touching them.
func checkRoundTrip(t *testing.T, typ byte, body []byte, appendView func([]byte) []byte) {
	t.Helper()
	want := Finish(append(append([]byte(nil), typ, 0, 0, 0, 0), body...), 0)
	if got := appendView(nil); !bytes.Equal(got, want) {
		t.Fatalf("round trip:\n got % x\nwant % x", got, want)
	}
	prefix := []byte("prefix")
	if got := appendView(append([]byte(nil), prefix...)); !bytes.Equal(got, append(prefix, want...)) {
		t.Fatalf("append after a prefix:\n got % x\nwant prefix+% x", got, want)
	}
}

// checkDecodes checks that pgproto3 accepts a body the view accepted: the
// view is never more lenient than an independent decoder.
func checkDecodes(t *testing.T, msg pgproto3.Message, body []byte) {
	t.Helper()
	if err := msg.Decode(body); err != nil {
		t.Fatalf("the view read % x, pgproto3 refuses it: %v", body, err)
	}
}

package wire

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FuzzClientMessages feeds arbitrary bytes to the client pump as the client
// stream after startup: it must never panic, whatever the frames say.
// Seeds: testdata/fuzz/FuzzClientMessages.
func FuzzClientMessages(f *testing.F) {
	f.Add(encodeAll(&pgproto3.Query{String: "SELECT snowflake.nextval()"}))
	f.Add(encodeAll(&pgproto3.Parse{Name: "s", Query: "SELECT snowflake.nextval() + $1::int8 * 0 AS x", ParameterOIDs: []uint32{20}},
		&pgproto3.Describe{ObjectType: 'S', Name: "s"},
		&pgproto3.Bind{PreparedStatement: "s", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{make([]byte, 8)}},
		&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{}, &pgproto3.Terminate{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, track := range []bool{false, true} {
			ss := benchSession(track, bytes.NewReader(data))
			ss.cp.cr.Max = 1 << 20
			_ = ss.cp.loop()
		}
	})
}

// FuzzStartupPacket checks the startup packet decoder.
func FuzzStartupPacket(f *testing.F) {
	b, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "u", "options": "-c snowflake.node=3"}}).Encode(nil)
	f.Add(b[4:])
	f.Add([]byte{0, 3, 0, 0, 0})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if len(pkt) < 4 {
			return
		}
		_, _ = startupParams(pkt)
	})
}

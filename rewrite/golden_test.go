package rewrite

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snowflake-proxy/snowflake-proxy/rewrite/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden")

// Golden files: testdata/golden/NAME.sql holds one SQL string (its final
// newline is not part of it); NAME.golden holds the plan as JSON followed
// by the text rendered by RenderLiteral and as plan.Params with sampleValues.
// Run `go test ./rewrite -run Golden -update` after a deliberate change and
// review the diff.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	r := New(Config{})
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		t.Run(name, func(t *testing.T) {
			sql := readSQL(t, f)
			got := goldenText(r.Plan(sql))
			path := strings.TrimSuffix(f, ".sql") + ".golden"
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("plan of %s differs from %s:\n--- got\n%s\n--- want\n%s", f, path, got, want)
			}
		})
	}
}

func readSQL(t testing.TB, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// sampleValues returns fixed values for the slots of t: IDs 1000000001,
// 1000000002, ... for Nextval, 2000000001, ... for Currval, and a small DO
// statement naming the operation for extension slots.
func sampleValues(t *plan.Template) []plan.Value {
	vals := make([]plan.Value, len(t.Slots))
	for i, s := range t.Slots {
		switch s.Op {
		case plan.Nextval:
			vals[i] = plan.Value{ID: 1000000001 + int64(i), Valid: true}
		case plan.Currval:
			vals[i] = plan.Value{ID: 2000000001 + int64(i), Valid: true}
		default:
			vals[i] = plan.Value{Text: "DO $shim$BEGIN RAISE NOTICE '" + opName(s.Op) + "'; END$shim$"}
		}
	}
	return vals
}

// unfilled is sampleValues with no generated value: what a session renders
// when the fast path cannot serve.
func unfilled(t *plan.Template) []plan.Value {
	vals := sampleValues(t)
	for i := range vals {
		if t.Slots[i].Op.IsID() {
			vals[i] = plan.Value{}
		}
	}
	return vals
}

func goldenText(p *plan.Plan) []byte {
	var b bytes.Buffer
	view := planView(p)
	j, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		panic(err)
	}
	b.Write(j)
	b.WriteString("\n")
	if p.Template != nil {
		b.WriteString("-- RenderLiteral:\n")
		b.Write(p.Template.RenderLiteral(nil, sampleValues(p.Template)))
		b.WriteString("\n-- RenderParams:\n")
		b.Write(p.Template.Render(nil, plan.Params, p.MaxParam, sampleValues(p.Template)))
		b.WriteString("\n")
	}
	if p.Inserts != nil {
		if t := p.Inserts.Template(sampleDefaults(p.Inserts)); t != nil {
			b.WriteString("-- Inserts.Template (sample catalog: id at 0, sub_id at 2), RenderLiteral:\n")
			b.Write(t.RenderLiteral(nil, sampleValues(t)))
			b.WriteString("\n-- and unfilled:\n")
			b.Write(t.RenderLiteral(nil, unfilled(t)))
			b.WriteString("\n-- RenderParams:\n")
			b.Write(t.Render(nil, plan.Params, p.MaxParam, sampleValues(t)))
			b.WriteString("\n")
		}
	}
	if p.Copy != nil {
		b.WriteString("-- Copy.Text with id and sub_id:\n")
		b.WriteString(p.Copy.Text([]string{`"id"`, `"sub_id"`}))
		b.WriteString("\n")
	}
	return b.Bytes()
}

// sampleDefaults is the catalog the golden files assume for every INSERT
// target: column id (position 0) and column sub_id (position 2) default to
// snowflake.nextval of their own sequences; the role may insert anything.
func sampleDefaults(in *plan.Inserts) [][]plan.ColumnDefault {
	defs := make([][]plan.ColumnDefault, len(in.Targets))
	for i := range defs {
		defs[i] = []plan.ColumnDefault{
			{Name: "id", Quoted: `"id"`, Position: 0, Seq: `"public"."t_id_seq"`, Arg: "'16401'::pg_catalog.regclass", Insertable: true, AllInsertable: true},
			{Name: "sub_id", Quoted: `"sub_id"`, Position: 2, Seq: `"public"."t_sub_id_seq"`, Arg: "'16402'::pg_catalog.regclass", Insertable: true, AllInsertable: true},
		}
	}
	return defs
}

func opName(op plan.SlotOp) string {
	switch op {
	case plan.Nextval:
		return "Nextval"
	case plan.Currval:
		return "Currval"
	case plan.CreateExtension:
		return "CreateExtension"
	case plan.DropExtension:
		return "DropExtension"
	case plan.AlterExtension:
		return "AlterExtension"
	}
	return "?"
}

var touchNames = []struct {
	t    plan.Touch
	name string
}{
	{plan.TouchNode, "Node"}, {plan.TouchSearchPath, "SearchPath"}, {plan.TouchReadOnly, "ReadOnly"},
	{plan.TouchCatalog, "Catalog"}, {plan.TouchRole, "Role"}, {plan.TouchPrepared, "Prepared"},
	{plan.TouchAll, "All"}, {plan.TouchShim, "Shim"}, {plan.TouchSequence, "Sequence"},
}

type slotView struct {
	Op      string
	Seq     string                 `json:",omitempty"`
	Arg     string                 `json:",omitempty"`
	Ext     *plan.ExtensionOptions `json:",omitempty"`
	Default bool                   `json:",omitempty"`
}

type templateView struct {
	Parts []string
	Slots []slotView
}

type planViewT struct {
	Passthrough bool             `json:",omitempty"`
	Template    *templateView    `json:",omitempty"`
	Local       *plan.Local      `json:",omitempty"`
	Statements  []plan.Statement `json:",omitempty"`
	MaxParam    int              `json:",omitempty"`
	Touches     []string         `json:",omitempty"`
	ShimCalls   bool             `json:",omitempty"`
	Inserts     []plan.Insert    `json:",omitempty"`
	Copy        *plan.Copy       `json:",omitempty"`
	PlainInsert bool             `json:",omitempty"`
}

func planView(p *plan.Plan) planViewT {
	if p == plan.Passthrough {
		return planViewT{Passthrough: true}
	}
	v := planViewT{Local: p.Local, Statements: p.Statements, MaxParam: p.MaxParam, ShimCalls: p.ShimCalls}
	for _, tn := range touchNames {
		if p.Touches&tn.t != 0 {
			v.Touches = append(v.Touches, tn.name)
		}
	}
	if p.Copy != nil {
		c := *p.Copy
		c.SQL = "" // the input file
		v.Copy = &c
	}
	if p.Inserts != nil {
		v.Inserts, v.PlainInsert = p.Inserts.Targets, p.Inserts.Plain
	}
	if p.Template != nil {
		v.Template = &templateView{Parts: p.Template.Parts, Slots: []slotView{}}
		for _, s := range p.Template.Slots {
			v.Template.Slots = append(v.Template.Slots, slotView{Op: opName(s.Op), Seq: s.Seq, Arg: s.Arg, Ext: s.Ext, Default: s.Default})
		}
	}
	return v
}

package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/weir-io/weir/internal/component"
	"github.com/weir-io/weir/internal/components"
)

const kindsUsage = `Usage: weir kinds [KIND]

Without KIND, lists the sink and source kinds this binary knows, with their
capabilities. With KIND, lists that kind's configuration keys: for a sink,
the keys of [sink.KIND] and [secondary.KIND]; for a source, of [source.KIND].
`

// kindsCmd prints the kinds of reg, or one kind's keys.
func kindsCmd(reg *component.Registry, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help"):
		fmt.Fprint(stdout, kindsUsage)
		return 0
	case len(args) > 1 || len(args) == 1 && strings.HasPrefix(args[0], "-"):
		fmt.Fprint(stderr, kindsUsage)
		return 2
	case len(args) == 0:
		return printTables(stdout, stderr, reg.SinkTable(), reg.SourceTable(), component.Table{Header: []string{"columns:"}, Rows: legendRows()})
	}
	name := args[0]
	type section struct {
		title  string
		fields []component.Field
	}
	var secs []section
	if k, ok := reg.Sink(name); ok {
		secs = append(secs, section{fmt.Sprintf("sink %s: %s\nkeys of [sink.%s] (flag --sink-%s-<key>, env WEIR_SINK_%s_<KEY>) and of [secondary.%s]:",
			name, k.Summary(), name, name, strings.ToUpper(name), name), k.Fields()})
	}
	if k, ok := reg.Source(name); ok {
		secs = append(secs, section{fmt.Sprintf("source %s: %s\nkeys of [source.%s]:", name, k.Summary(), name), k.Fields()})
	}
	if len(secs) == 0 {
		fmt.Fprintf(stderr, "weir kinds: no sink or source kind %q; known: sinks %s, sources %s\n",
			name, strings.Join(reg.SinkNames(), ", "), strings.Join(reg.SourceNames(), ", "))
		return 2
	}
	for i, sec := range secs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout, sec.title)
		if code := printTables(stdout, stderr, component.KeyTable("", sec.fields, false)); code != 0 {
			return code
		}
	}
	return 0
}

func legendRows() [][]string {
	var rows [][]string
	for _, l := range strings.Split(component.CapabilityLegend, "\n") {
		rows = append(rows, []string{"  " + l})
	}
	return rows
}

func printTables(stdout, stderr io.Writer, tables ...component.Table) int {
	for i, t := range tables {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := t.Text(stdout); err != nil {
			fmt.Fprintf(stderr, "weir kinds: %v\n", err)
			return 1
		}
	}
	return 0
}

func kinds(args []string, stdout, stderr io.Writer) int {
	return kindsCmd(components.Registry(), args, stdout, stderr)
}

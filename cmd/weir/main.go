// Command weir is the crash-safe ingestion daemon and its tools.
//
//	weir serve [flags]   run the daemon (see docs/configuration.md)
//	weir push  [flags]   push newline-delimited records from stdin
package main

import (
	"os"

	"github.com/weir-io/weir/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

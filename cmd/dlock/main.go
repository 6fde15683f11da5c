// Command dlock runs programs under distributed locks, shows who holds a lock,
// serves a zero-setup lock server, and demonstrates why fencing tokens
// matter. See docs/cli.md, or run `dlock help`.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Package clients holds the sources of the gateway's clients in other
// languages (the Python module and the Java package), for tools that run
// them: `dlock demo --gateway` writes them out and starts its workers with
// them. Application code in Go should use package dlock, or talk to the
// gateway over HTTP; services in Python or Java copy the sources from the
// repository (clients/README.md).
package clients

import "embed"

// Sources holds python/dlockgw.py and the Java package under
// java/src/dev/dlock/gateway, at those paths.
//
//go:embed python/dlockgw.py java/src/dev/dlock/gateway/*.java
var Sources embed.FS

// The paths in Sources.
const (
	// PythonModule is the Python client, one module (import dlockgw).
	PythonModule = "python/dlockgw.py"
	// JavaSources is the directory of the Java client's package
	// dev.dlock.gateway; compile every .java file in it.
	JavaSources = "java/src/dev/dlock/gateway"
)

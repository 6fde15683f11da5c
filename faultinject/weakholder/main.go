// Command weakholder is the holder process of the fault-injection suite's
// negative controls that weaken dlock itself. The suite builds it with
//
//	go build -tags dlock_weak ./faultinject/weakholder
//
// which makes the lease engine count validity from replies instead of
// requests (internal/lease/countfrom_weak.go) and makes redisdlock release
// and renew whatever owner holds a key (redisdlock/weak_dlockweak.go). The
// scenarios must catch both. It is useless for anything else.
package main

import "github.com/dlockdev/dlock/faultinject"

func main() { faultinject.HolderMain() }

//go:build !dlocketcd

package main

// dlockEtcdLibrary stands in for dlock's etcd backend when the bench is built
// without the tag dlocketcd (run.sh sets it when the etcddlock package
// builds): its rows then say "not available".
func dlockEtcdLibrary() *library {
	return &library{
		Name: "dlock (etcd)", Backend: "etcd", Module: "github.com/dlockdev/dlock", IsDlock: true,
		Missing: "not available: the etcddlock package did not build when this report was made",
	}
}

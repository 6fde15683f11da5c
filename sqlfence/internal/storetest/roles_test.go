package storetest_test

import "github.com/dlockdev/dlock/internal/testing/testproc"

// roles are the child processes' parts (proof_test.go).
var roles = map[string]testproc.Role{}

package faultinject_test

import "testing"

// etcdMemberEnv makes the test binary an etcd member process.
const etcdMemberEnv = "FAULTINJECT_ETCD_MEMBER"

func etcdMemberMain() {}

func (r *rig) otherLeftovers(key string) []string { return nil }

func newOtherRig(t *testing.T, kind, recipe string) *rig {
	t.Fatalf("no rig for %s", kind)
	return nil
}

func (r *rig) otherRestart() { r.t.Fatalf("no restart for %s", r.kind) }

package main

import (
	"fmt"
	"os"
	"testing"
)

// The client cost alone, as a go test benchmark:
//
//	cd bench && go test -run '^$' -bench . -benchmem
//
// (add -tags dlocketcd when the etcddlock package builds). TestMain starts
// the same servers as the report does, in the durable variant.

var testServers *servers

func TestMain(m *testing.M) {
	if len(os.Args) == 6 && os.Args[1] == "serve-etcd" {
		if err := serveEtcd(os.Args[2], os.Args[3], os.Args[4], variant(os.Args[5])); err != nil {
			fmt.Fprintln(os.Stderr, "serve-etcd:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// Start servers only when a benchmark will run (go vet and go test
	// without -bench start nothing).
	if f := testingBenchFlag(); f == "" {
		return m.Run()
	}
	s := &servers{env: &env{}}
	var err error
	if s.redis, err = startRedis(durable); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.redis.stop()
	if s.zk, err = startZooKeeper(durable); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.zk.stop()
	if s.etcd, err = startEtcd(durable); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.etcd.stop()
	s.env.redisAddr, s.env.zkAddr, s.env.etcdAddr = s.redis.addr, s.zk.addr, s.etcd.addr
	testServers = s
	return m.Run()
}

func testingBenchFlag() string {
	for i, a := range os.Args {
		for _, p := range []string{"-test.bench=", "-bench="} {
			if len(a) > len(p) && a[:len(p)] == p {
				return a[len(p):]
			}
		}
		if (a == "-test.bench" || a == "-bench") && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, l := range libraries() {
		if l.Missing != "" {
			continue
		}
		b.Run(l.Name, func(b *testing.B) { benchCycle(b, testServers, l) })
	}
}

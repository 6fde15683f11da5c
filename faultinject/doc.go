// Package faultinject is dlock's fault-injection suite: it proves, on every
// backend and under faults, the safety properties dlock documents, and
// proves that its checkers fire by running each scenario against a
// deliberately weakened variant too. The scenarios are its tests
// (go -C faultinject test .); docs/reliability.md describes them and their
// figures. It is test tooling, not for applications. Its network faults
// come from internal/testing/faultproxy, the proxy the conformance suite
// uses too, run on the Mono clock.
//
// The exported pieces are the parts the holder processes share with the
// harness:
//
//   - HolderMain, the main function of a holder process: a dlock client
//     driven by JSON commands on stdin (Command), reporting on stdout
//     (Event). The test binary re-executes itself as a holder when
//     HolderEnv is set; weakholder is the same holder built with the
//     dlock_weak tag;
//   - Resource and ResourceServer, the fenced resource the holders write
//     to, which logs every decision with a Mono (CLOCK_MONOTONIC)
//     timestamp;
//   - KillZKSession, which ends a ZooKeeper session from outside;
//   - the naive recipes (naive.go, holder_etcd.go): locks with the flaws
//     of hand-written ones, the negative controls of the algorithm
//     scenarios.
package faultinject

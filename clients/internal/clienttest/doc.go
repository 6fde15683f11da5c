// Package clienttest tests the gateway's Java and Python clients
// (clients/java, clients/python): it starts a real Redis (and etcd, for a
// few scenarios) and the gateway in process, then runs each client as a
// child process, a driver that speaks lines on stdin and stdout
// (clients/python/tests/driver.py, clients/java/test/Driver.java), and
// checks what it says through the gateway and the backend. python3 and a
// JDK (javac, java) must be installed: the tests fail, never skip, without
// them.
//
// It is a module of its own so that no released module's go.sum lists its
// test-only requirements.
package clienttest

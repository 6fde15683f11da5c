package faultinject_test

// raceExitCode is the exit status of a process whose race detector fired.
// A holder that exits with it, having hit only go-zookeeper's known race
// (package zkrace), is not counted as failed.
const raceExitCode = 66

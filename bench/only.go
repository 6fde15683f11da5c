package main

import "strings"

// onlySections is what -only selects when its value names sections rather
// than libraries: workloads of the modes section (issue 12: "modes",
// "semaphore", "rwmutex", see modeSelection) and the election section
// (issue 13: "election"), comma-separated. ok is false when the value is a
// library regexp; modes is nil when no modes workload was named.
func onlySections(only string) (modes []modeWorkload, election, ok bool) {
	if only == "" {
		return nil, false, false
	}
	var names []string
	for _, name := range strings.Split(only, ",") {
		switch name = strings.TrimSpace(name); name {
		case "election":
			election = true
		case "modes", "semaphore", "rwmutex":
			names = append(names, name)
		default:
			return nil, false, false
		}
	}
	if len(names) > 0 {
		modes = modeSelection(strings.Join(names, ","))
	}
	return modes, election, true
}

package main

import "strings"

// onlySelection is what -only selects when its value names sections.
type onlySelection struct {
	// modes are the workloads of the modes section, nil when none was named.
	modes []modeWorkload
	// election and memory select those sections.
	election, memory bool
}

// sections are the sections the selection runs: the round-trip floor with
// the modes and election sections, whose tables are in RTTs.
func (sel onlySelection) sections() []string {
	var secs []string
	if sel.modes != nil || sel.election {
		secs = append(secs, "rtt")
	}
	if sel.modes != nil {
		secs = append(secs, "modes")
	}
	if sel.election {
		secs = append(secs, "election")
	}
	if sel.memory {
		secs = append(secs, "memory")
	}
	return secs
}

// onlySections is what -only selects when its value names sections rather
// than libraries: workloads of the modes section ("modes", "semaphore",
// "rwmutex", see modeSelection), the election section ("election") and the
// memory section ("memory"), comma-separated. ok is
// false when the value is a library regexp.
func onlySections(only string) (sel onlySelection, ok bool) {
	if only == "" {
		return sel, false
	}
	var names []string
	for _, name := range strings.Split(only, ",") {
		switch name = strings.TrimSpace(name); name {
		case "election":
			sel.election = true
		case "memory":
			sel.memory = true
		case "modes", "semaphore", "rwmutex":
			names = append(names, name)
		default:
			return onlySelection{}, false
		}
	}
	if len(names) > 0 {
		sel.modes = modeSelection(strings.Join(names, ","))
	}
	return sel, true
}

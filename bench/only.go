package main

import (
	"slices"
	"strings"
)

// allSections are the sections of a full run, in the order they run
// (rtt, uncontended and contended once per round).
var allSections = []string{"rtt", "uncontended", "contended", "modes", "permits", "election", "cost", "renewal", "keys", "queue", "memory", "gateway", "replicas"}

// onlyNames are the values -only accepts as section names: every section,
// and the workloads of the modes section.
var onlyNames = append(slices.Clone(allSections), "semaphore", "rwmutex")

// inRTTs are the sections whose tables are in RTTs: -only runs the
// round-trip floor with them.
var inRTTs = []string{"uncontended", "contended", "modes", "election"}

// onlySelection is what -only selects when its value names sections.
type onlySelection struct {
	// modes are the workloads of the modes section, nil when none was named.
	modes []modeWorkload
	// names are the sections named, the modes section's workloads as
	// "modes".
	names []string
}

// sections are the sections the selection runs, in the order of a full
// run: the round-trip floor with those whose tables are in RTTs.
func (sel onlySelection) sections() []string {
	var secs []string
	for _, s := range allSections {
		named := slices.Contains(sel.names, s)
		if s == "rtt" {
			named = named || slices.ContainsFunc(sel.names, func(n string) bool { return slices.Contains(inRTTs, n) })
		}
		if named {
			secs = append(secs, s)
		}
	}
	return secs
}

// onlySections is what -only selects when its value names sections rather
// than libraries (onlyNames, comma-separated; "semaphore" and "rwmutex" are
// workloads of the modes section, see modeSelection). ok is false when the
// value is a library regexp.
func onlySections(only string) (sel onlySelection, ok bool) {
	if only == "" {
		return sel, false
	}
	var modes []string
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "modes" || name == "semaphore" || name == "rwmutex":
			modes = append(modes, name)
			name = "modes"
		case !slices.Contains(allSections, name):
			return onlySelection{}, false
		}
		if !slices.Contains(sel.names, name) {
			sel.names = append(sel.names, name)
		}
	}
	if len(modes) > 0 {
		sel.modes = modeSelection(strings.Join(modes, ","))
	}
	return sel, true
}

package main

import "strings"

// suggest returns the candidate that the user probably meant by typed: one
// that starts with it, or the nearest within an edit distance of 2 (typos:
// a letter wrong, missing, extra, or two swapped). It returns "" when none
// is near, and for a distance as long as typed itself ("x" is not a typo
// of "ls"). Ties go to the earlier candidate.
func suggest(typed string, candidates []string) string {
	if typed == "" {
		return ""
	}
	best, bestDist := "", 3
	for _, c := range candidates {
		d := editDistance(typed, c)
		if strings.HasPrefix(c, typed) && d > 0 {
			d = min(d, 1) // a prefix counts as close: "stat" means "status"
		}
		if d < bestDist && d < len(typed) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions, and transpositions of adjacent
// letters each cost 1 ("stauts" is 1 from "status").
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance between x[:i] and y[:j].
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

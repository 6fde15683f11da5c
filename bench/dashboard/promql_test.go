package main

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// A reader of the PromQL the dashboard uses, enough to find the metrics
// and labels each query names: selectors with matchers, function calls,
// aggregations with by/without, binary operators, numbers, ranges and
// offsets. The test checks what it finds against dlockprom.

// selector is a metric named by a query, with the labels its matchers use.
type selector struct {
	metric string
	labels []string
}

// queryRefs is what a query refers to: its selectors, and the labels of its
// by, without, on and ignoring clauses.
type queryRefs struct {
	selectors []selector
	grouping  []string
}

// keywords are PromQL identifiers that are not metric names.
var keywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}

// aggregations are PromQL's aggregation operators, which may come before
// their by or without clause.
var aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// token is a lexeme of PromQL: an identifier, a string, a number or a
// duration (kind 'n'), or one punctuation character.
type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number, 'v' Grafana variable, or the character
	text string
}

func lex(expr string) ([]token, error) {
	var ts []token
	for i := 0; i < len(expr); {
		c := rune(expr[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && rune(expr[j]) != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %q", expr[i:])
			}
			ts = append(ts, token{'s', expr[i+1 : j]})
			i = j + 1
		case c == '_' || c == ':' || unicode.IsLetter(c):
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || unicode.IsLetter(rune(expr[j])) || unicode.IsDigit(rune(expr[j]))) {
				j++
			}
			ts = append(ts, token{'i', expr[i:j]})
			i = j
		case unicode.IsDigit(c) || c == '.':
			j := i
			for j < len(expr) && (expr[j] == '.' || unicode.IsLetter(rune(expr[j])) || unicode.IsDigit(rune(expr[j]))) {
				j++
			}
			ts = append(ts, token{'n', expr[i:j]})
			i = j
		case c == '$': // a Grafana variable: $name or ${name}
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				j = i + strings.IndexByte(expr[i:], '}') + 1
				if j == i {
					return nil, fmt.Errorf("unterminated variable at %q", expr[i:])
				}
			} else {
				for j < len(expr) && (expr[j] == '_' || unicode.IsLetter(rune(expr[j])) || unicode.IsDigit(rune(expr[j]))) {
					j++
				}
			}
			ts = append(ts, token{'v', expr[i:j]})
			i = j
		case strings.ContainsRune("(){}[],+-*/%^=!~<>", c):
			ts = append(ts, token{byte(c), string(c)})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %q", c, expr[i:])
		}
	}
	return ts, nil
}

// parseRefs finds the selectors and grouping labels of a query.
func parseRefs(expr string) (queryRefs, error) {
	ts, err := lex(expr)
	if err != nil {
		return queryRefs{}, err
	}
	var r queryRefs
	next := func(i int) byte {
		if i+1 < len(ts) {
			return ts[i+1].kind
		}
		return 0
	}
	for i := 0; i < len(ts); i++ {
		t := ts[i]
		switch {
		case t.kind == '[': // a range or subquery: durations only
			for i < len(ts) && ts[i].kind != ']' {
				i++
			}
		case t.kind == '{':
			return r, fmt.Errorf("a selector without a metric name at %d", i)
		case t.kind != 'i':
		case slices.Contains(keywords, t.text):
			if next(i) != '(' {
				continue
			}
			for i += 2; i < len(ts) && ts[i].kind != ')'; i++ {
				if ts[i].kind == 'i' {
					r.grouping = append(r.grouping, ts[i].text)
				}
			}
		case next(i) == '(': // a function or an aggregation
		case slices.Contains(aggregations, t.text) && next(i) == 'i': // sum by (…) (…)
		default:
			sel := selector{metric: t.text}
			if next(i) == '{' {
				for i += 2; i < len(ts) && ts[i].kind != '}'; i++ {
					if ts[i].kind == 'i' {
						sel.labels = append(sel.labels, ts[i].text)
					}
				}
				if i == len(ts) {
					return r, fmt.Errorf("unterminated selector of %s", t.text)
				}
			}
			r.selectors = append(r.selectors, sel)
		}
	}
	return r, nil
}

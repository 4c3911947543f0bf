package main

import (
	"fmt"
	"strings"
)

// listFlag is a flag that may be given several times, each time with one
// value or several comma-separated; empty values are refused.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return fmt.Errorf("an empty name in %q: give names, comma-separated", v)
		}
		*l = append(*l, part)
	}
	return nil
}

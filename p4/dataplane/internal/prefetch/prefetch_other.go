//go:build !amd64 || purego

package prefetch

func lines(p *byte, n int) {}

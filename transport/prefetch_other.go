//go:build !amd64 || purego

package transport

func prefetchLines(p *byte, n int) {}

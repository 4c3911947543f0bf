//go:build !amd64 || purego

package wire

// Without vector kernels the loops of payload.go do all the work.

var useAVX2 = false

func int32Bytes(vals []int32) []byte { return nil }

func swapFast(dst, src []byte) int { return 0 }

func addFast(vals []int32, payload []byte) int { return 0 }

//go:build !linux

package wirebytes

import "errors"

// Capture needs Linux's AF_PACKET sockets.
type Capture struct{}

// StartCapture fails: the capture needs Linux.
func StartCapture(iface string, port int) (*Capture, error) {
	return nil, errors.New("capture: needs Linux (AF_PACKET sockets)")
}

// Stop is never reached.
func (c *Capture) Stop() ([]Call, Bytes, error) {
	return nil, Bytes{}, errors.New("capture: needs Linux")
}

//go:build !linux

package bmv2

import (
	"errors"
	"syscall"
)

func inNetNS(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	return errors.New("bmv2: network namespaces need Linux")
}

func sysProcAttr() *syscall.SysProcAttr { return nil }

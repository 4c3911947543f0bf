// Package bmv2example is the BMv2 example: run.sh runs a SwitchML job
// through BMv2 executing the compiled v1model program, with each worker in a
// network namespace cabled to a switch port and the controller programming
// BMv2 over P4Runtime. The package holds no code, only the test that runs
// the script as a user would (it needs root and the P4 toolchain).
//
//	sudo examples/bmv2/run.sh [WORKERS] [ELEMENTS] [DTYPE]
package bmv2example

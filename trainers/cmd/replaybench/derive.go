package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/switchml/switchml-go/trainers/internal/cli"
	"github.com/switchml/switchml-go/trainers/profile"
)

// unitSizes is the repeated --unit NAME=PARAMETERS flag.
type unitSizes map[string]int64

func (u unitSizes) String() string { return fmt.Sprint(map[string]int64(u)) }

func (u unitSizes) Set(s string) error {
	name, n, ok := strings.Cut(s, "=")
	v, err := strconv.ParseInt(n, 10, 64)
	if !ok || name == "" || err != nil || v < 0 {
		return fmt.Errorf("--unit %q: want UNIT=PARAMETERS, such as features=371389089 (0 drops the unit)", s)
	}
	u[name] = v
	return nil
}

// derive is `replaybench derive`: a profile of a larger model scaled from
// a measured one (profile.Derive), for replaying the paper-size models.
func derive(args []string) error {
	fs := cli.NewFlagSet("replaybench derive", "--from P.json --name NAME --unit UNIT=N... [--note TEXT] --out Q.json", "Writes the profile of a larger model scaled from a measured one.")
	from := fs.String("from", "", "the measured profile to scale from")
	name := fs.String("name", "", "model name of the derived profile (replay it as --models NAME)")
	note := fs.String("note", "", "where the sizes come from")
	out := fs.String("out", "", "the derived profile to write")
	sizes := unitSizes{}
	fs.Var(sizes, "unit", "UNIT=PARAMETERS: the unit's parameter count in the derived model (repeat; 0 drops the unit)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *from == "" || *name == "" || *out == "" || len(sizes) == 0 {
		return cli.Usagef("replaybench derive", "--from, --name, --unit and --out are required")
	}
	p, err := profile.Load(*from)
	if err != nil {
		return err
	}
	how := "backward time of resized units and the update scaled with their parameters, forward unchanged (replaybench derive " + strings.Join(args, " ") + ")"
	if *note != "" {
		how = *note + "; " + how
	}
	q, err := profile.Derive(p, *name, how, sizes)
	if err != nil {
		return err
	}
	return q.Save(*out)
}

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// tokenEnv names the environment variable that holds a job's token.
const tokenEnv = "SWITCHML_TOKEN"

// jobToken returns the job's token from the command's flags: --token-file
// (its content, less a trailing newline), else --token, else
// $SWITCHML_TOKEN. A --token given on the command line works but is
// readable by every local user, so it warns on warn. Errors name the file,
// never its content.
func jobToken(flags *flag.FlagSet, file string, warn io.Writer) (string, error) {
	onLine := false
	flags.Visit(func(f *flag.Flag) { onLine = onLine || f.Name == "token" })
	token := flags.Lookup("token").Value.String()
	if file != "" {
		if onLine {
			return "", errors.New("--token and --token-file both give the job's token: keep --token-file")
		}
		b, err := os.ReadFile(file)
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err // the path is named once, below
		}
		if err != nil {
			return "", fmt.Errorf("--token-file %s: %w", file, err)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		b = bytes.TrimSuffix(b, []byte("\r"))
		if len(b) == 0 {
			return "", fmt.Errorf("--token-file %s is empty: write the job's token into it (the same on every rank)", file)
		}
		return string(b), nil
	}
	if onLine {
		fmt.Fprintf(warn, "switchml %s: warning: --token on the command line can be read by every user of this host (ps, /proc/PID/cmdline); give it with --token-file FILE or $%s instead\n", strings.TrimPrefix(flags.Name(), "switchml "), tokenEnv)
		return token, nil
	}
	return os.Getenv(tokenEnv), nil
}

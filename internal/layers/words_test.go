package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// flagWord is a command-line flag written in text: "--name" not glued to
// a word or another dash.
var flagWord = regexp.MustCompile(`(^|[^-\w])--[a-z]`)

// argvToken is a literal that is one argument of a command line the
// library runs (BMv2's simple_switch_grpc, p4c): words to a program, not
// to a reader.
var argvToken = regexp.MustCompile(`^--[a-z][a-z0-9-]*(=\S*)?$`)

// flagLiterals are the string literals of the non-test Go files under
// dirs (module-relative) whose text names a command-line flag, as
// "file:line: literal", and the literals that are argument tokens of a
// command the library runs.
func flagLiterals(t *testing.T, root string, dirs ...string) (words, argv []string) {
	t.Helper()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				text, err := strconv.Unquote(lit.Value)
				if err != nil || !flagWord.MatchString(text) {
					return true
				}
				pos := fset.Position(lit.Pos())
				rel, _ := filepath.Rel(root, pos.Filename)
				where := rel + ":" + strconv.Itoa(pos.Line) + ": " + lit.Value
				if argvToken.MatchString(text) {
					argv = append(argv, where)
				} else {
					words = append(words, where)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return words, argv
}

// maxFlagWords bounds the library's literals that name a command-line
// flag: the library names its settings by their Go fields
// (Config.FallbackPeers, field.Error) and the CLI writes them as its
// flags; what is left names flags of other programs (bf-p4c,
// simple_switch_grpc) or is a daemon's own word.
const maxFlagWords = 10

// TestTheLibrarySpeaksInItsOwnTerms: at most maxFlagWords string literals
// of switchml/ and p4/ (tests aside) name a command-line flag; argument
// tokens of the commands the library runs ("--thrift-port") are not words
// to a reader and are listed apart.
func TestTheLibrarySpeaksInItsOwnTerms(t *testing.T) {
	words, argv := flagLiterals(t, moduleRoot(t), "switchml", "p4")
	t.Logf("%d literals name a flag, and %d are argument tokens of commands the library runs", len(words), len(argv))
	if len(words) > maxFlagWords {
		t.Errorf("%d string literals of switchml/ and p4/ name a command-line flag, more than %d: name the Go field (a field.Error's {Field}) and let the CLI write its flag:\n%s",
			len(words), maxFlagWords, strings.Join(words, "\n"))
	}
}

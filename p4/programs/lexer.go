package programs

import (
	"fmt"
	"strings"
)

// token is one lexical element of a P4 source.
type token struct {
	text string
	line int
	str  bool // a string literal (text without the quotes)
}

// tokenize splits P4_16 source into tokens. Comments and preprocessor lines
// are dropped. '<' and '>' are always single tokens so that nested type
// arguments (register<bit<32>>) need no special case; the few operators the
// parser evaluates are recognised from their parts.
func tokenize(src string) ([]token, error) {
	var toks []token
	line := 1
	atLineStart := true
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			atLineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#' && atLineStart:
			// Preprocessor line, with backslash continuations.
			for i < len(src) && src[i] != '\n' {
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					line++
					i++
				}
				i++
			}
			continue
		}
		atLineStart = false
		switch {
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated comment", line)
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += end + 4
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				if j < len(src) && src[j] == '\n' {
					return nil, fmt.Errorf("line %d: newline in string literal", line)
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("line %d: unterminated string literal", line)
			}
			toks = append(toks, token{text: src[i+1 : j], line: line, str: true})
			i = j + 1
		case isIdentStart(c) || isDigit(c):
			// Identifiers and numbers, including width-prefixed literals
			// such as 32w0x1F or 8s5.
			j := i
			for j < len(src) && (isIdentStart(src[j]) || isDigit(src[j])) {
				j++
			}
			toks = append(toks, token{text: src[i:j], line: line})
			i = j
		default:
			n := 1
			for _, op := range []string{"&&&", "&&", "||", "==", "!=", "<=", ">=", "++", ".."} {
				if strings.HasPrefix(src[i:], op) {
					n = len(op)
					break
				}
			}
			// "<=" and ">=" would swallow the '>' that closes a type
			// argument list followed by '=' (RegisterAction<...> r = {...}).
			if n == 2 && (src[i] == '<' || src[i] == '>') {
				n = 1
			}
			toks = append(toks, token{text: src[i : i+n], line: line})
			i += n
		}
	}
	return toks, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdent reports whether s is an identifier (not a number).
func isIdent(s string) bool {
	return s != "" && isIdentStart(s[0])
}

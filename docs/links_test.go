// Package docs holds firn's documentation; its test checks that every
// relative link in README.md, docs/ and deploy/README.md resolves: the
// file exists, and a #fragment names a heading of it.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link is a Markdown inline link's target: [text](target).
var link = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

func TestRelativeLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "../deploy/README.md")
	checked := 0
	for _, f := range files {
		for _, target := range links(t, f) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: a fragment into a file that is not Markdown", f, target)
				continue
			}
			if !anchors(t, dest)[frag] {
				t.Errorf("%s: link %q: %s has no heading with the anchor %q", f, target, dest, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links checked: the pattern is not finding them", checked)
	}
}

// links returns the link targets of a Markdown file, outside code blocks.
func links(t *testing.T, path string) []string {
	var out []string
	for _, line := range prose(t, path) {
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors returns the anchors of a Markdown file's headings, as GitHub
// makes them: lower case, letters, digits, spaces, hyphens and
// underscores kept, spaces made hyphens, a repeated one suffixed -1, -2, ….
func anchors(t *testing.T, path string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range prose(t, path) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// prose returns a Markdown file's lines outside fenced code blocks.
func prose(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

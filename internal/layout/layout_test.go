package layout

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the module root (this package is internal/layout).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	return dir
}

func goFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", root(t), "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	return strings.Fields(string(out))
}

// No source file over 600 lines, generated code aside: a file that grows
// past it holds more than one concern and is split by them.
func TestNoFileOver600Lines(t *testing.T) {
	for _, f := range goFiles(t) {
		lines, generated := count(t, filepath.Join(root(t), f))
		if !generated {
			require.LessOrEqual(t, lines, 600, "%s has %d lines: split it by concern", f, lines)
		}
	}
}

func count(t *testing.T, path string) (lines int, generated bool) {
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines++
		if strings.HasPrefix(sc.Text(), "// Code generated") {
			generated = true
		}
	}
	require.NoError(t, sc.Err())
	return lines, generated
}

// Every package says what it is for.
func TestEveryPackageHasADocComment(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Doc}}", "./...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, doc, _ := strings.Cut(line, "|")
		require.NotEmpty(t, doc, "package %s has no doc comment", pkg)
	}
}

// The scenario scripts are where make test finds them: at least 15 across
// raftnode, the group coordinator and the cluster scenarios (testcases/,
// which the simulator replays and a campaign runner can run against real
// processes).
func TestScenarioScriptsExist(t *testing.T) {
	var n int
	for _, glob := range []string{"raftnode/memcluster/testdata/*.txt", "kafka/group/testdata/*.txt", "testcases/*.txt"} {
		m, err := filepath.Glob(filepath.Join(root(t), glob))
		require.NoError(t, err)
		require.NotEmpty(t, m, glob)
		for _, f := range m {
			if filepath.Base(f) != "sim-seeds.txt" {
				n++
			}
		}
	}
	require.GreaterOrEqual(t, n, 15)
}

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vdlctl against the failpoints test program (failpoints/internal/fptest),
// built the failpoint way and the production way.

const fpIOError = "failpoints/internal/fptest/demoIOError"

func buildAndStart(t *testing.T, instrumented bool) string {
	t.Helper()
	dir := t.TempDir()
	const pkg = "./failpoints/internal/fptest/cmd/fptest"
	var cmd *exec.Cmd
	if instrumented {
		cmd = exec.Command("scripts/build-failpoint.sh", dir, pkg)
	} else {
		cmd = exec.Command("go", "build", "-o", dir+"/", pkg)
	}
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	p := exec.Command(filepath.Join(dir, "fptest"))
	p.Stderr = os.Stderr
	stdout, err := p.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.Start())
	t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR ")
	require.True(t, ok, line)
	return addr
}

func vdlctl(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestFailpointCommands(t *testing.T) {
	addr := buildAndStart(t, true)

	code, out, errOut := vdlctl("--admin", addr, "failpoint", "list")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "NAME")
	assert.Regexp(t, fpIOError+`\s+-\s+0\s+fptest.Write`, out)

	code, out, errOut = vdlctl("--admin", addr, "failpoint", "enable", fpIOError, "return(true)")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "enabled "+fpIOError+": return(true)\n", out)

	code, out, _ = vdlctl("--admin", "http://"+addr, "fp", "list", "--json")
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"term": "return(true)"`)
	assert.Contains(t, out, `"full_name": "github.com/vdl-project/vdl/`+fpIOError+`"`)

	code, out, _ = vdlctl("--admin", addr, "failpoint", "get", fpIOError)
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"enabled": true`)

	code, out, errOut = vdlctl("--admin", addr, "failpoint", "disable", fpIOError)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "disabled "+fpIOError+"\n", out)

	code, _, errOut = vdlctl("--admin", addr, "failpoint", "enable", "storage/nope", "return(true)")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `unknown failpoint "storage/nope"`)
	assert.Contains(t, errOut, "vdlctl failpoint list")

	code, _, errOut = vdlctl("--admin", addr, "failpoint", "enable", fpIOError, "retrun(true)")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `bad failpoint term "retrun(true)"`)

	code, _, errOut = vdlctl("--admin", addr, "failpoint", "enable", fpIOError)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "takes 2 argument(s): NAME TERM")

	code, _, errOut = vdlctl("--bogus")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "unknown flag")
}

func TestFailpointProductionServer(t *testing.T) {
	addr := buildAndStart(t, false)
	code, _, errOut := vdlctl("--admin", addr, "failpoint", "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "production build")
}

func TestFailpointUnreachable(t *testing.T) {
	code, _, errOut := vdlctl("--admin", "127.0.0.1:1", "failpoint", "disable", fpIOError)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "cannot reach the admin HTTP at http://127.0.0.1:1")
}

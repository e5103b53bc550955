package failpoints_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/failpoints"
)

// End to end, on real binaries: the test program (internal/fptest) built the
// failpoint way (scripts/build-failpoint.sh, the same as make
// build-failpoint) and the production way (plain go build).

const (
	fpIOError = "failpoints/internal/fptest/demoIOError"
	fpCrash   = "failpoints/internal/fptest/demoCrash"
	fpStep    = "failpoints/internal/fptest/demoBeforeStep"
)

var instrumentedBin, productionBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fpe2e")
	if err != nil {
		panic(err)
	}
	code := 1
	if err := buildBins(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building the test program:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildBins(dir string) error {
	const pkg = "./failpoints/internal/fptest/cmd/fptest"
	cmd := exec.Command("scripts/build-failpoint.sh", filepath.Join(dir, "failpoint"), pkg)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failpoint build: %v\n%s", err, out)
	}
	cmd = exec.Command("go", "build", "-o", filepath.Join(dir, "production", "fptest"), pkg)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("production build: %v\n%s", err, out)
	}
	instrumentedBin = filepath.Join(dir, "failpoint", "fptest")
	productionBin = filepath.Join(dir, "production", "fptest")
	return nil
}

type proc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
	done   chan struct{}
	err    error
}

// start runs bin with extra environment; it returns once the program printed
// its address, or (addr "") once it exited.
func start(t *testing.T, bin string, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin), stderr: new(bytes.Buffer), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	if a, ok := strings.CutPrefix(strings.TrimSpace(line), "ADDR "); ok {
		p.addr = a
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) wait(t *testing.T) *exec.ExitError {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("process did not exit")
	}
	var ee *exec.ExitError
	require.ErrorAs(t, p.err, &ee, "stderr: %s", p.stderr)
	return ee
}

func (p *proc) client() *failpoints.Client { return &failpoints.Client{BaseURL: p.addr} }

func get(t *testing.T, p *proc, path string) (int, string, error) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestE2EListEnableHitsDisable(t *testing.T) {
	p := start(t, instrumentedBin)
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	c := p.client()

	infos, err := c.List()
	require.NoError(t, err)
	names := map[string]failpoints.Info{}
	for _, in := range infos {
		names[in.Name] = in
	}
	require.Len(t, names, 3)
	assert.Equal(t, "fptest.Write, before the write", names[fpIOError].Place)
	assert.False(t, names[fpIOError].Enabled)

	code, body, err := get(t, p, "/write")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, body)

	// 2*return(true): fires twice, then the evaluation is not allowed and the
	// body does not run, so it is not a hit.
	require.NoError(t, c.Enable(fpIOError, "2*return(true)"))
	for i := 0; i < 3; i++ {
		code, body, err = get(t, p, "/write")
		require.NoError(t, err)
		if i < 2 {
			assert.Equal(t, http.StatusInternalServerError, code)
			assert.Contains(t, body, "injected I/O error")
		} else {
			assert.Equal(t, http.StatusOK, code, body)
		}
	}
	in, err := c.Get(failpoints.FullName(fpIOError))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), in.Hits)
	assert.Equal(t, "2*return(true)", in.Term)

	require.NoError(t, c.Enable(fpIOError, "return(true)"))
	require.NoError(t, c.Disable(fpIOError))
	code, _, err = get(t, p, "/write")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	assert.ErrorIs(t, c.Enable("failpoints/internal/fptest/demoIOErr", "return(true)"), failpoints.ErrUnknown)
	assert.ErrorIs(t, c.Enable(fpIOError, "return(true"), failpoints.ErrBadTerm)

	// sleep(ms) delays the marker.
	require.NoError(t, c.Enable(fpStep, "sleep(300)"))
	t0 := time.Now()
	code, _, err = get(t, p, "/step")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.GreaterOrEqual(t, time.Since(t0), 300*time.Millisecond)
}

func TestE2EPauseReenable(t *testing.T) {
	p := start(t, instrumentedBin)
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	c := p.client()
	require.NoError(t, c.Enable(fpStep, "pause"))

	stepped := make(chan int, 1)
	go func() {
		code, _, _ := get(t, p, "/step")
		stepped <- code
	}()
	select {
	case <-stepped:
		t.Fatal("step went through a paused failpoint")
	case <-time.After(300 * time.Millisecond):
	}
	// Re-PUT while a request is paused in the failpoint: the plain library
	// deadlocks here.
	done := make(chan error, 1)
	go func() { done <- c.Enable(fpStep, "1*sleep(1)") }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("re-enabling a paused failpoint deadlocked")
	}
	select {
	case code := <-stepped:
		assert.Equal(t, http.StatusOK, code)
	case <-time.After(5 * time.Second):
		t.Fatal("paused request not released")
	}
	code, _, err := get(t, p, "/step")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	in, err := c.Get(fpStep)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), in.Hits, "the released pause and the 1*sleep fired; the third step did not")
}

func TestE2ECrashIsSIGKILL(t *testing.T) {
	p := start(t, instrumentedBin)
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	c := p.client()

	// The gap Crash closes: a panic term in a net/http handler is recovered
	// and the process lives on.
	require.NoError(t, c.Enable(fpCrash, "return(true)"))
	_, _, err := get(t, p, "/crash")
	require.Error(t, err, "the connection dies with the process")
	ee := p.wait(t)
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	assert.True(t, ws.Signaled(), "exit: %v", ee)
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	assert.Contains(t, p.stderr.String(), "vdl failpoint: crash (SIGKILL)")
}

func TestE2EPanicTermIsRecoveredByHTTP(t *testing.T) {
	p := start(t, instrumentedBin)
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	c := p.client()
	require.NoError(t, c.Enable(fpCrash, "panic"))
	_, _, err := get(t, p, "/crash")
	require.Error(t, err)
	_, err = c.List()
	require.NoError(t, err, "net/http recovered the panic: the process is alive, which is why crash markers use Crash()")
}

func TestE2EGOFAILPOINTS(t *testing.T) {
	p := start(t, instrumentedBin, "GO_FAILPOINTS="+failpoints.FullName(fpIOError)+"=return(true)")
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	in, err := p.client().Get(fpIOError)
	require.NoError(t, err)
	assert.Equal(t, "return(true)", in.Term)
	code, _, err := get(t, p, "/write")
	require.NoError(t, err)
	assert.Equal(t, http.StatusInternalServerError, code)

	// A misspelled name is reported and the program refuses to start.
	p = start(t, instrumentedBin, "GO_FAILPOINTS="+failpoints.FullName(fpIOError)+"x=return(true)")
	assert.Empty(t, p.addr)
	assert.Equal(t, 3, p.wait(t).ExitCode())
	assert.Contains(t, p.stderr.String(), "unknown failpoints")
	assert.Contains(t, p.stderr.String(), fpIOError+"x")
}

func TestE2ENoLibraryHTTPListener(t *testing.T) {
	for _, bin := range []string{instrumentedBin, productionBin} {
		p := start(t, bin, "GO_FAILPOINTS_HTTP=127.0.0.1:0")
		assert.Empty(t, p.addr)
		assert.Equal(t, 2, p.wait(t).ExitCode())
		assert.Contains(t, p.stderr.String(), "GO_FAILPOINTS_HTTP")
	}
}

func TestE2EProductionBuild(t *testing.T) {
	p := start(t, productionBin)
	require.NotEmpty(t, p.addr, "stderr: %s", p.stderr)
	for _, path := range []string{failpoints.Prefix, failpoints.Prefix + "/", failpoints.Prefix + "/" + fpIOError} {
		code, _, err := get(t, p, path)
		require.NoError(t, err)
		assert.Equal(t, http.StatusNotFound, code, path)
	}
	err := p.client().Enable(fpIOError, "return(true)")
	assert.ErrorIs(t, err, failpoints.ErrNoControlPlane)
	code, _, err := get(t, p, "/write")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	// No failpoint name (marker, short or full) and no route in the binary;
	// the failpoint build does have them (so the search itself works).
	prod, err := os.ReadFile(productionBin)
	require.NoError(t, err)
	inst, err := os.ReadFile(instrumentedBin)
	require.NoError(t, err)
	for _, s := range []string{"demoIOError", "demoCrash", "demoBeforeStep", "fptest/demo", failpoints.Prefix} {
		assert.False(t, bytes.Contains(prod, []byte(s)), "production binary contains %q", s)
		assert.True(t, bytes.Contains(inst, []byte(s)), "failpoint binary lacks %q", s)
	}

	// GO_FAILPOINTS on a production build is an error, not silently ignored.
	p = start(t, productionBin, "GO_FAILPOINTS="+failpoints.FullName(fpIOError)+"=return(true)")
	assert.Equal(t, 3, p.wait(t).ExitCode())
	assert.Contains(t, p.stderr.String(), "production build")
}

// The failpoint build leaves the work tree as it was.
func TestE2ENoRewrittenSources(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--ignored", "--untracked-files=all").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "__failpoint_stash__") || strings.Contains(line, "__failpoint_binding__") {
			t.Error(errors.New("rewrite left behind: " + line))
		}
	}
	src, err := os.ReadFile("internal/fptest/fptest.go")
	require.NoError(t, err)
	assert.NotContains(t, string(src), "_curpkg_")
}

package failpointtest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/proccluster"
)

// TestProductionBinary builds the production vdl (go build ./cmd/vdl, as
// make build does) and checks the guarantee of docs/failpoints.md on it:
// no failpoint name — a registered short name, its full name, its marker
// name — nor the control plane's route is in the binary (all are in the
// failpoint build, so the search works); a running production server
// answers 404 on every control-plane route (the client says
// ErrNoControlPlane) while its admin HTTP works; GO_FAILPOINTS makes it
// refuse to start.
func TestProductionBinary(t *testing.T) {
	prod, err := os.ReadFile(proccluster.Production.Path(t))
	require.NoError(t, err)
	inst, err := os.ReadFile(fpBin)
	require.NoError(t, err)
	strs := []string{failpoints.Prefix}
	for name := range allFailpoints {
		strs = append(strs, name, name[strings.LastIndex(name, "/")+1:])
		// The failpoint build makes full names at run time (package path +
		// marker name), so they are only looked for in the production one.
		assert.False(t, bytes.Contains(prod, []byte(failpoints.FullName(name))), "the production binary contains %q", failpoints.FullName(name))
	}
	for _, s := range strs {
		assert.False(t, bytes.Contains(prod, []byte(s)), "the production binary contains %q", s)
		assert.True(t, bytes.Contains(inst, []byte(s)), "the failpoint binary lacks %q", s)
	}

	c := startNodes(t, proccluster.Production.Path(t), 1)
	n := c.Nodes[0]
	assert.Equal(t, http.StatusOK, c.Health(n.ID))
	for _, path := range []string{failpoints.Prefix, failpoints.Prefix + "/", failpoints.Prefix + "/storage/beforeSync",
		failpoints.Prefix + "/" + failpoints.FullName("raftnode/dropTo")} {
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			req, err := http.NewRequest(method, n.AdminBase+path, strings.NewReader("return(true)"))
			require.NoError(t, err)
			resp, err := n.AdminClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s %s", method, path)
			assert.Empty(t, resp.Header.Get(failpoints.HeaderName), "%s %s", method, path)
		}
	}
	_, err = fp(n).List()
	assert.ErrorIs(t, err, failpoints.ErrNoControlPlane)
	assert.ErrorIs(t, fp(n).Enable("storage/beforeSync", "return(true)"), failpoints.ErrNoControlPlane)
	// It still serves: a produce is acknowledged.
	cl := c.client()
	assert.NoError(t, produce(cl, "production"))
	cl.Close()
	c.StopAll()

	// GO_FAILPOINTS on a production build is refused, not ignored.
	c.StartNode(n.ID, "GO_FAILPOINTS="+failpoints.FullName("storage/beforeSync")+"=return(true)")
	err = c.WaitExit(n.ID, 10*time.Second)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, proccluster.Tail(n.LogPath, 5), "production build")
}

// markedFuncs matches the functions holding VDL's failpoint markers (and
// the closures inlined from them, e.g. Host.Step's).
const markedFuncs = `vdl/storage\.\(\*Log\)\.(flush|writeChunk|roll|recover)$|vdl/storage\.\(\*segment\)\.writeIndexFiles$|` +
	`vdl/raftnode\.\(\*Node\)\.(send|applied)$|vdl/raftnode\.\(\*InstallJob\)\.Run$|vdl/raftnode\.\(\*WriteJob\)\.run$|vdl/raftnode\.afterSave$|\(\*Host\)\.Step|vdl/kafka\.\(\*conn\)\.loop$`

// TestMarkersCompileAway: in the production build a marker costs nothing.
// The production vdl of the work tree and the baseline (the same tree with
// every marker removed, see BenchmarkProduceMarkers) are disassembled; every
// function holding a marker has the same machine instructions in both
// (compared as sorted multisets with addresses and closure numbers masked,
// since the register allocator may order a spill differently), and every
// VDL function has the same size in both.
func TestMarkersCompileAway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a third binary")
	}
	base := disasm(t, baselineBinary(t))
	prod := disasm(t, proccluster.Production.Path(t))
	require.NotEmpty(t, prod)
	var names []string
	for name := range prod {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, ok := base[name]
		if !assert.True(t, ok, "%s is not in the baseline", name) {
			continue
		}
		assert.Equal(t, b, prod[name], "%s: the markers changed the machine code", name)
	}
	assert.Len(t, prod, len(base))
	t.Logf("%d functions with markers compile to the same instructions: %v", len(names), names)

	// And no other VDL function changed (inlining into callers, say): the
	// same functions, of the same sizes but for register-allocation noise
	// (a spill ordered differently: a few bytes in a few functions).
	bs, ps := funcSizes(t, baselineBinary(t)), funcSizes(t, proccluster.Production.Path(t))
	require.Equal(t, sizeNames(bs), sizeNames(ps), "the same VDL functions in both builds")
	bm, pm := sizeMap(bs), sizeMap(ps)
	var differ []string
	for name, b := range bm {
		if d := pm[name] - b; d != 0 {
			differ = append(differ, fmt.Sprintf("%s %+d", name, d))
			assert.LessOrEqual(t, max(d, -d), 16, "%s changed size by %d bytes", name, d)
		}
	}
	sort.Strings(differ)
	assert.LessOrEqual(t, len(differ), 3, "functions whose size changed: %v", differ)
	t.Logf("%d VDL functions; size differences (register allocation): %v", len(pm), differ)
}

// sizeNames and sizeMap read funcSizes' "name size" lines.
func sizeNames(lines string) []string {
	var names []string
	for _, l := range strings.Split(lines, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			names = append(names, f[0])
		}
	}
	return names
}

func sizeMap(lines string) map[string]int {
	m := map[string]int{}
	for _, l := range strings.Split(lines, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			n, _ := strconv.Atoi(f[1])
			m[f[0]] += n // closures share the name .N: sum them
		}
	}
	return m
}

// funcSizes lists bin's VDL functions as sorted "name size" lines.
func funcSizes(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "tool", "nm", "-size", bin).Output()
	require.NoError(t, err)
	var fns []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "T" && strings.HasPrefix(f[3], failpoints.Module+"/") {
			fns = append(fns, closure.ReplaceAllString(f[3], ".N")+" "+f[1])
		}
	}
	sort.Strings(fns)
	return strings.Join(fns, "\n")
}

var (
	hexNum  = regexp.MustCompile(`0x[0-9a-f]+`)
	closure = regexp.MustCompile(`\.(func)?[0-9]+\b`)
)

// disasm returns the functions of bin matching markedFuncs: normalized
// name → sorted normalized instructions.
func disasm(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "tool", "objdump", "-s", markedFuncs, bin).Output()
	require.NoError(t, err)
	fns := map[string]string{}
	var name string
	var ins []string
	flush := func() {
		if name != "" {
			sort.Strings(ins)
			fns[name] = strings.Join(ins, "\n")
		}
		ins = nil
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "TEXT "); ok {
			flush()
			name = closure.ReplaceAllString(strings.Fields(rest)[0], ".N")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		s := strings.Join(f[3:], " ") // drop file:line, address, encoding
		// objdump names the zero-size runtime.zerobase only when no other
		// symbol shares its address: layout noise, the same instruction.
		s = strings.ReplaceAll(s, "runtime.zerobase(SB)", "X(IP)")
		ins = append(ins, closure.ReplaceAllString(hexNum.ReplaceAllString(s, "X"), ".N"))
	}
	flush()
	return fns
}

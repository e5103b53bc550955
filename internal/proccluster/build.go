package proccluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Binary is one build of ./cmd/vdl of the work tree, made at most once per
// test binary run (go test runs a package's tests in one process), into
// the run's BinDir.
type Binary struct {
	build func(dir string) (string, error)
	once  sync.Once
	path  string
	err   error
}

var (
	// Production is the plain go build, as make build.
	Production = &Binary{build: func(dir string) (string, error) {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		return GoBuild(root, filepath.Join(dir, "production"))
	}}
	// Failpoint is the failpoint build (scripts/build-failpoint.sh,
	// docs/failpoints.md): markers live, the admin control plane mounted.
	// It carries the canaries too (internal/canary): a server runs the one
	// VDL_CANARY names.
	Failpoint = &Binary{build: buildFailpoint}
	// Canary is go build -tags vdlcanary: the production build whose
	// servers run the canary VDL_CANARY names (internal/canary).
	Canary = &Binary{build: func(dir string) (string, error) {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		return goBuildCmd(root, filepath.Join(dir, "canary"), "vdl", "-tags", "vdlcanary")
	}}
	// Vdlctl is the admin CLI (go build ./cmd/vdlctl).
	Vdlctl = &Binary{build: func(dir string) (string, error) {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		return goBuildCmd(root, filepath.Join(dir, "vdlctl"), "vdlctl")
	}}
)

// Build builds the binary on first use and returns its path.
func (b *Binary) Build() (string, error) {
	b.once.Do(func() {
		dir, err := BinDir()
		if err != nil {
			b.err = err
			return
		}
		b.path, b.err = b.build(dir)
	})
	return b.path, b.err
}

// Path is Build for a test: a failed build fails it.
func (b *Binary) Path(tb testing.TB) string {
	tb.Helper()
	p, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var (
	binMu  sync.Mutex
	binDir string
)

// BinDir is this test binary's build directory, made on first use and
// removed by Main (not a t.TempDir: that would go with the first test).
func BinDir() (string, error) {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir == "" {
		dir, err := os.MkdirTemp("", "vdl-proccluster-bin-")
		if err != nil {
			return "", err
		}
		binDir = dir
	}
	return binDir, nil
}

// Main is TestMain for a package that runs process clusters: setup (if
// not nil) runs first, and no test runs if it fails; the builds are
// removed at the end.
func Main(m *testing.M, setup func() error) {
	code := 1
	if setup == nil {
		code = m.Run()
	} else if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	binMu.Lock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	binMu.Unlock()
	os.Exit(code)
}

// ModuleRoot is the directory of the vdl module's go.mod, found upward from
// the working directory (a test runs in its package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// goTool is the go command of the toolchain that built the test, when it is
// there (a test binary may run without go on PATH), else "go".
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// GoBuild builds ./cmd/vdl of the module in srcDir into outDir/vdl with a
// plain go build (the production build; failpointtest also builds a copy of
// the tree with the markers stripped this way).
func GoBuild(srcDir, outDir string) (string, error) { return goBuildCmd(srcDir, outDir, "vdl") }

// goBuildCmd builds ./cmd/<name> of the module in srcDir into outDir/<name>.
func goBuildCmd(srcDir, outDir, name string, flags ...string) (string, error) {
	bin := filepath.Join(outDir, name)
	cmd := exec.Command(goTool(), append(append([]string{"build"}, flags...), "-o", bin, "./cmd/"+name)...)
	cmd.Dir = srcDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s in %s: %v\n%s", name, srcDir, err, out)
	}
	return bin, nil
}

func buildFailpoint(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	outDir := filepath.Join(dir, "failpoint")
	cmd := exec.Command(filepath.Join(root, "scripts", "build-failpoint.sh"), outDir, "./cmd/vdl")
	cmd.Dir = root
	if os.Getenv("GO") == "" {
		cmd.Env = append(os.Environ(), "GO="+goTool())
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("failpoint build of ./cmd/vdl: %v\n%s", err, out)
	}
	return filepath.Join(outDir, "vdl"), nil
}

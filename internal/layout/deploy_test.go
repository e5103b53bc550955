package layout

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The server image is a static binary on scratch: the binary must need no
// dynamic loader (no libc in the image), and the image builds where a
// container engine answers (skipped with a message otherwise).
func TestServerImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "vdl")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/vdl")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "the binary needs a dynamic loader: it would not run on scratch")
	}

	containerfile, err := os.ReadFile(filepath.Join(root(t), "deploy", "Containerfile"))
	require.NoError(t, err)
	require.Contains(t, string(containerfile), "FROM scratch")

	engine := ""
	for _, e := range []string{"podman", "docker"} {
		if p, err := exec.LookPath(e); err == nil && exec.Command(p, "info").Run() == nil {
			engine = p
			break
		}
	}
	if engine == "" {
		t.Skip("no podman or docker answers here: the image build itself is not tried")
	}
	staged := filepath.Join(root(t), "deploy", "vdl")
	require.NoError(t, os.Rename(bin, staged))
	defer os.Remove(staged)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, engine, "build", "-f", "deploy/Containerfile", "-t", "vdl-test-image", ".")
	build.Dir = root(t)
	out, err = build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	version, err := exec.CommandContext(ctx, engine, "run", "--rm", "vdl-test-image", "--help").CombinedOutput()
	require.NoError(t, err, "%s", version)
	require.True(t, strings.Contains(string(version), "vdl"), "%s", version)
}

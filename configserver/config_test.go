package configserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LoadConfig refuses a misspelt key instead of ignoring it, and Validate
// fills the defaults Start would run with.
func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	good := "id = 1\ndata_dir = \"/d\"\ninsecure = true\n[[peers]]\nid = 1\nraft = \"h:7200\"\napi = \"h:7100\"\n"
	c, err := LoadConfig(write("good.toml", good))
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	assert.Equal(t, 10000, c.DownAfterMs)
	assert.Equal(t, "vdl", c.ClusterID)

	_, err = LoadConfig(write("typo.toml", good+"down_after = 5\n"))
	assert.ErrorContains(t, err, "unknown keys")
	c, err = LoadConfig(write("alone.toml", "id = 2\ndata_dir = \"/d\"\ninsecure = true\n"))
	require.NoError(t, err)
	assert.ErrorContains(t, c.Validate(), "peers must include this config server")
}

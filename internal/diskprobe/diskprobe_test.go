package diskprobe

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	mbps, err := Measure(dir, 64<<10, 2, 50*time.Millisecond)
	require.NoError(t, err)
	require.Positive(t, mbps)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, left, "probe files are removed")

	_, err = Measure(dir+"/missing", 64<<10, 1, time.Millisecond)
	require.Error(t, err, "a directory that does not exist is an error")
}

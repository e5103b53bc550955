package proccluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ReadBytes is what the node's process has read from the storage layer so
// far (Linux /proc/<pid>/io read_bytes: reads that went to the disk, not
// those the page cache served); -1 if unknown. Benchmarks use it to show a
// read was served from memory.
func (n *Node) ReadBytes() int64 {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return -1
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

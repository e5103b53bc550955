package server

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// The tail cache budget (storage.tail_cache_bytes): the memory all the
// server's streams share for their newest records (storage.TailBudget).
// Default: a sixteenth of the memory the server may use, between 64 MiB
// and 512 MiB. A sixteenth because the cache is Go heap, which the
// garbage collector lets grow to several times what is live between
// cycles, up to a quarter of the memory (gc.go), and the page cache, the
// read buffers and the Raft pipeline need the rest.
const (
	minTailBudget = 64 << 20
	maxTailBudget = 512 << 20
)

func defaultTailBudget() int64 {
	return min(max(memoryLimit()/16, minTailBudget), maxTailBudget)
}

// memoryLimit is the machine's memory (MemTotal), or the cgroup's limit if
// lower; 0 if neither can be read.
func memoryLimit() int64 {
	var total int64
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				total = kb << 10
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}

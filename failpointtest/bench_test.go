package failpointtest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// BenchmarkProduceMarkers: the production build's produce path is not
// slower with the failpoint markers than without them. Two production
// binaries (plain go build ./cmd/vdl) are built in the same run:
//
//   - "markers": the work tree as it is;
//   - "baseline": a copy of the work tree with every failpoint.Inject
//     marker (and the then unused imports) removed — the same code before
//     the markers, independent of what else changed since any commit.
//
// Each runs a fresh 3-node cluster under the same produce load (franz-go,
// acks=all, VDL_FPBENCH_PRODUCERS clients (4) producing 1 KiB records for
// VDL_FPBENCH_SECONDS (10)), VDL_FPBENCH_ROUNDS rounds (2) alternating
// baseline, markers | markers, baseline | ... (ABBA). It prints the MB/s of
// each run and the ratio markers/baseline of the means (reported as the
// "ratio" metric; 1.0 = same speed), and the same for the servers' CPU time
// per MB ("cpu-ratio"), which a busy machine disturbs less than MB/s. TestMarkersCompileAway is the exact
// counterpart: the same machine code.
//
//	make bench-failpoints
//	go test -run '^$' -bench '^BenchmarkProduceMarkers$' -benchtime 1x -timeout 15m ./failpointtest/
func BenchmarkProduceMarkers(b *testing.B) {
	secs := envInt(b, "VDL_FPBENCH_SECONDS", 10)
	producers := envInt(b, "VDL_FPBENCH_PRODUCERS", 4)
	rounds := envInt(b, "VDL_FPBENCH_ROUNDS", 2)
	markers := proccluster.Production.Path(b)
	baseline := baselineBinary(b)
	for range b.N {
		runs := map[string][]float64{}
		cpu := map[string][]float64{} // server CPU ms per MB acknowledged
		type variant struct{ name, bin string }
		for round := 1; round <= rounds; round++ {
			order := []variant{{"baseline", baseline}, {"markers", markers}}
			if round%2 == 0 {
				order[0], order[1] = order[1], order[0] // ABBA: a drift favours neither
			}
			for _, v := range order {
				// Start each run with the previous one's data gone and
				// written back, so its writeback does not slow this one.
				syscall.Sync()
				c := startCluster(b, v.bin)
				cpu0 := c.CPUSeconds()
				mbps := produceLoad(b, c, producers, time.Duration(secs)*time.Second)
				cpuPerMB := (c.CPUSeconds() - cpu0) * 1000 / (mbps * float64(secs))
				c.StopAll()
				_ = os.RemoveAll(c.Dir)
				runs[v.name] = append(runs[v.name], mbps)
				cpu[v.name] = append(cpu[v.name], cpuPerMB)
				b.Logf("round %d %-8s %7.2f MB/s %6.1f CPU-ms/MB", round, v.name, mbps, cpuPerMB)
			}
		}
		mb, mm := mean(runs["baseline"]), mean(runs["markers"])
		fmt.Printf("produce MB/s  baseline %v mean %.2f | markers %v mean %.2f | ratio markers/baseline %.3f\n",
			fmtRuns(runs["baseline"]), mb, fmtRuns(runs["markers"]), mm, mm/mb)
		b.ReportMetric(mb, "MB/s-baseline")
		b.ReportMetric(mm, "MB/s-markers")
		cb, cm := mean(cpu["baseline"]), mean(cpu["markers"])
		fmt.Printf("server CPU-ms/MB  baseline %v mean %.1f | markers %v mean %.1f | ratio markers/baseline %.3f\n",
			fmtRuns(cpu["baseline"]), cb, fmtRuns(cpu["markers"]), cm, cm/cb)
		b.ReportMetric(mm/mb, "ratio")
		b.ReportMetric(cm/cb, "cpu-ratio")
	}
}

func envInt(b *testing.B, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want a positive integer", name, v)
		}
		return n
	}
	return def
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func fmtRuns(xs []float64) string {
	var ss []string
	for _, x := range xs {
		ss = append(ss, fmt.Sprintf("%.2f", x))
	}
	return "[" + strings.Join(ss, " ") + "]"
}

// produceLoad runs producers clients for d and returns the acknowledged
// MB/s (record values only).
func produceLoad(b *testing.B, c *cluster, producers int, d time.Duration) float64 {
	const size = 1 << 10
	value := []byte(strings.Repeat("v", size))
	var acked atomic.Int64
	var seeds []string
	for _, n := range c.Nodes {
		seeds = append(seeds, n.Kafka)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range producers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(stream),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite(),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond),
			kgo.MaxBufferedRecords(2048), kgo.ProducerBatchMaxBytes(1<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		wg.Go(func() {
			for ctx.Err() == nil {
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if err == nil {
						acked.Add(1)
					}
				})
			}
			fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = cl.Flush(fctx)
			fcancel()
		})
	}
	wg.Wait()
	b.Logf("load: %d producers, %s (+ flush %s)", producers, d, time.Since(start)-d)
	return float64(acked.Load()*size) / 1e6 / d.Seconds()
}

var (
	baseOnce sync.Once
	baseBin  string
	baseErr  error
)

// baselineBinary builds ./cmd/vdl (production build) from a copy of the
// work tree without failpoint markers, once per test binary run.
func baselineBinary(tb testing.TB) string {
	tb.Helper()
	baseOnce.Do(func() { baseBin, baseErr = buildBaseline() })
	if baseErr != nil {
		tb.Fatal(baseErr)
	}
	return baseBin
}

func buildBaseline() (string, error) {
	binDir, err := proccluster.BinDir()
	if err != nil {
		return "", err
	}
	src := filepath.Join(binDir, "baseline-src")
	out, err := exec.Command("git", "-C", "..", "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		return "", fmt.Errorf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		data, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree
			}
			return "", err
		}
		dst := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return "", err
		}
	}
	n, err := stripMarkers(src)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("no failpoint marker found to strip")
	}
	return proccluster.GoBuild(src, filepath.Join(binDir, "baseline"))
}

var (
	injectStart = regexp.MustCompile(`^(\s*)failpoint\.Inject\(`)
	fpImport    = regexp.MustCompile(`^\s*"github\.com/(pingcap/failpoint|vdl-project/vdl/failpoints)"\s*$`)
	fpUse       = regexp.MustCompile(`\bfailpoint\.[A-Z]`)
	fpsUse      = regexp.MustCompile(`\bfailpoints\.[A-Z]`)
)

// stripMarkers removes every failpoint.Inject statement (from its line to
// the "})" line at the same indentation) from the non-test Go files under
// dir, and the failpoint imports left unused. It returns how many markers
// it removed.
func stripMarkers(dir string) (int, error) {
	total := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), "failpoint.Inject(") {
			return nil
		}
		lines := strings.Split(string(data), "\n")
		var kept []string
		for i := 0; i < len(lines); i++ {
			m := injectStart.FindStringSubmatch(lines[i])
			if m == nil {
				kept = append(kept, lines[i])
				continue
			}
			end := i
			for end < len(lines) && lines[end] != m[1]+"})" {
				end++
			}
			if end == len(lines) {
				return fmt.Errorf("%s:%d: no end of the marker", path, i+1)
			}
			total++
			i = end
		}
		body := strings.Join(kept, "\n")
		var out []string
		for _, l := range strings.Split(body, "\n") {
			if fpImport.MatchString(l) {
				use := fpUse
				if strings.Contains(l, "vdl/failpoints") {
					use = fpsUse
				}
				if !use.MatchString(body) {
					continue
				}
			}
			out = append(out, l)
		}
		return os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644)
	})
	return total, err
}

package campaign

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vdl-project/vdl/checker"
)

// kcat (librdkafka) is the workload's second client implementation: its
// producers and consumers go into the same history as franz-go's. Each
// operation is one kcat process, so one connection (a connection id of
// its own in the history):
//
//	produce: printf 'VALUE\n' | kcat -P -b BROKERS -t S -p 0 -X acks=all -X message.send.max.retries=0 -v -v
//	  ok at N when it prints "Message delivered to partition 0 (offset N)" (whatever
//	  its exit status: an error about another broker's connection), unknown otherwise
//	fetch:   kcat -C -b BROKERS -t S -p 0 -o FROM -e -c 500 -f '%o %s\n'
//	  the records from FROM to the end of the stream (no high watermark)
//
// Values are unique as franz-go's (the same counter), so the checks treat
// both clients' writes alike. The debug log of a slow or failed produce is
// kept in the report directory (kcat/VALUE.log).

var kcatDelivered = regexp.MustCompile(`Message delivered to partition 0 \(offset (\d+)\)`)

// kcatPath is kcat on PATH, or an error saying the step needs it.
func kcatPath() (string, error) {
	p, err := exec.LookPath("kcat")
	if err != nil {
		return "", fmt.Errorf("kcat is not installed (apt-get install kcat): %w", errUnsupported)
	}
	return p, nil
}

func (r *runner) brokers() string { return strings.Join(r.c.KafkaAddrs(), ",") }

// kcatProduceLoop produces unique values with kcat, one process each,
// until ctx ends.
func (r *runner) kcatProduceLoop(ctx context.Context, kcat, stream string, mu *sync.Mutex, acked, unknown *atomic.Int64) {
	for ctx.Err() == nil {
		mu.Lock()
		r.next++
		v := fmt.Sprintf("%s-%d", stream, r.next)
		r.conns++
		conn := r.conns
		mu.Unlock()
		r.setClient(conn, clientKcat)
		h := r.history.Invoke(checker.Op{Kind: checker.KindProduce, Stream: stream, Client: conn, Conn: conn, Value: v})
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(pctx, kcat, "-P", "-b", r.brokers(), "-t", stream, "-p", "0",
			"-X", "acks=all", "-X", "message.send.max.retries=0", "-X", "linger.ms=0",
			"-X", "message.timeout.ms=5000", "-X", "enable.idempotence=false", "-v", "-v", "-d", "protocol,msg,broker")
		cmd.Stdin = strings.NewReader(v + "\n")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		r.keepKcatLog(v, conn, time.Since(start), out, err)
		// The delivery report is librdkafka's word that the broker
		// acknowledged the record; kcat may still exit non-zero for an
		// error about another broker's connection.
		if m := kcatDelivered.FindSubmatch(out); m != nil {
			off, _ := strconv.ParseInt(string(m[1]), 10, 64)
			h.ProduceOK(off)
			acked.Add(1)
			mu.Lock()
			r.acked[stream] = append(r.acked[stream], ack{v, off})
			mu.Unlock()
			continue
		}
		h.Info(kcatError(out, err), false) // it may or may not have landed
		unknown.Add(1)
		time.Sleep(50 * time.Millisecond)
	}
}

// keepKcatLog keeps librdkafka's debug log (protocol, msg, broker) of a
// produce that took over 300 ms or did not end in a delivery report, in
// the report directory's kcat/ (what it sent, when, to whom: a retry
// shows as "Retrying ProduceRequest").
func (r *runner) keepKcatLog(value string, conn int, took time.Duration, out []byte, err error) {
	if r.opts.ReportDir == "" || (took < 300*time.Millisecond && kcatDelivered.Match(out)) {
		return
	}
	dir := filepath.Join(r.opts.ReportDir, "kcat")
	if os.MkdirAll(dir, 0o755) != nil {
		return
	}
	head := fmt.Sprintf("produce %s, connection %d, took %v, exit %v\n", value, conn, took, err)
	_ = os.WriteFile(filepath.Join(dir, value+".log"), append([]byte(head), out...), 0o644)
}

// kcatConsumeLoop reads the stream from offset 0 as it grows, a kcat
// process per fetch, until ctx ends.
func (r *runner) kcatConsumeLoop(ctx context.Context, kcat, stream string, mu *sync.Mutex, polled *atomic.Int64) {
	var pos int64
	for ctx.Err() == nil {
		mu.Lock()
		r.conns++
		conn := r.conns
		mu.Unlock()
		r.setClient(conn, clientKcat)
		h := r.history.Invoke(checker.Op{Kind: checker.KindFetch, Stream: stream, Client: conn, Conn: conn, From: pos})
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(fctx, kcat, "-C", "-b", r.brokers(), "-t", stream, "-p", "0",
			"-o", strconv.FormatInt(pos, 10), "-e", "-c", "500", "-f", "%o %s\\n", "-X", "fetch.wait.max.ms=100")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		recs, perr := parseKcatRecords(stdout.Bytes(), pos)
		switch {
		case err != nil || perr != nil:
			h.Info(kcatError(stderr.Bytes(), errors.Join(err, perr)), false)
			time.Sleep(100 * time.Millisecond)
			continue
		case len(recs) == 0:
			h.Info("nothing new", false)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		h.FetchOK(recs, -1)
		pos = recs[len(recs)-1].Offset + 1
		polled.Add(int64(len(recs)))
	}
}

// parseKcatRecords reads "OFFSET VALUE" lines, keeping those from pos on.
func parseKcatRecords(out []byte, pos int64) ([]checker.Record, error) {
	var recs []checker.Record
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		o, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("kcat printed %q", sc.Text())
		}
		off, err := strconv.ParseInt(o, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("kcat printed %q", sc.Text())
		}
		if off >= pos {
			recs = append(recs, checker.Record{Offset: off, Value: v})
		}
	}
	return recs, sc.Err()
}

// kcatError is the gist of a failed kcat: its last error line.
func kcatError(out []byte, err error) string {
	var last string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "%7|") {
			continue // librdkafka's debug log
		}
		if strings.Contains(l, "ERROR") || strings.Contains(l, "rror") || strings.Contains(l, "failed") {
			last = strings.TrimSpace(l)
		}
	}
	if last == "" && err != nil {
		last = err.Error()
	}
	if last == "" {
		last = "no delivery report"
	}
	return "kcat: " + last
}

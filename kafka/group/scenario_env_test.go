package group

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"
)

// scenario drives one coordinator. Scripts name members (a, b, ...); the
// coordinator's member ids stay out of the output, which uses the names.
type scenario struct {
	c         *Coordinator
	now       int64
	ids       map[string]string // name -> member id
	gens      map[string]int32  // name -> generation of its last join answer
	parked    []parked          // join and sync requests not answered yet
	logOffset int64             // where the next offset commit sits in the offsets log
}

// parked is a JoinGroup or SyncGroup the coordinator has not answered.
type parked struct {
	name, kind string
	w          *Waiter
}

func newScenario() *scenario {
	return &scenario{c: New(Config{Nonce: "n"}), ids: map[string]string{}, gens: map[string]int32{}}
}

type handler func(s *scenario, t *testing.T, d *datadriven.TestData) string

var handlers map[string]handler

func init() {
	handlers = map[string]handler{
		"join":      (*scenario).join,
		"sync":      (*scenario).sync,
		"heartbeat": (*scenario).heartbeat,
		"leave":     (*scenario).leave,
		"commit":    (*scenario).commit,
		"offsets":   (*scenario).offsets,
		"advance":   (*scenario).advance,
		"describe":  (*scenario).describe,
	}
}

// handle runs a command, then reports every parked request it answered,
// in the order they were made.
func (s *scenario) handle(t *testing.T, d *datadriven.TestData) string {
	h, ok := handlers[d.Cmd]
	if !ok {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	var b strings.Builder
	if out := h(s, t, d); out != "" {
		b.WriteString(out + "\n")
	}
	b.WriteString(s.answered())
	return b.String()
}

// park keeps a request until it has its answer (answered prints it).
func (s *scenario) park(name, kind string, w *Waiter) string {
	s.parked = append(s.parked, parked{name, kind, w})
	if w.Done() {
		return ""
	}
	return fmt.Sprintf("%s: %s waits", name, kind)
}

// answered reports and forgets the parked requests that have answers.
func (s *scenario) answered() string {
	var b strings.Builder
	for _, p := range s.parked {
		if !p.w.Done() {
			continue
		}
		if p.kind == "join" {
			b.WriteString(s.joinAnswer(p.name, p.w.Join()) + "\n")
		} else {
			b.WriteString(s.syncAnswer(p.name, p.w.Sync()) + "\n")
		}
	}
	s.parked = slices.DeleteFunc(s.parked, func(p parked) bool { return p.w.Done() })
	return b.String()
}

func (s *scenario) joinAnswer(name string, r JoinResult) string {
	if r.Err == ErrNone || r.Err == kerr.MemberIDRequired.Code {
		s.ids[name] = r.MemberID // a first join learns its id, even from MEMBER_ID_REQUIRED
	}
	if r.Err != ErrNone {
		return fmt.Sprintf("%s: join: %s", name, errName(r.Err))
	}
	s.gens[name] = r.Generation
	out := fmt.Sprintf("%s: joined generation %d, protocol %s, leader %s", name, r.Generation, r.Protocol, s.name(r.Leader))
	if r.Members != nil {
		var ms []string
		for _, m := range r.Members {
			ms = append(ms, s.name(m.MemberID))
		}
		out += ", members " + strings.Join(ms, ",")
	}
	return out
}

func (s *scenario) syncAnswer(name string, r SyncResult) string {
	if r.Err != ErrNone {
		return fmt.Sprintf("%s: sync: %s", name, errName(r.Err))
	}
	return fmt.Sprintf("%s: synced, assignment %q", name, r.Assignment)
}

// name returns the script's name of a member id. A member whose first
// join is still waiting has no id known to the script yet, but its id
// starts with its client id, which is its name.
func (s *scenario) name(id string) string {
	for _, n := range slices.Sorted(maps.Keys(s.ids)) {
		if s.ids[n] == id {
			return n
		}
	}
	name, _, _ := strings.Cut(id, "-"+s.c.Config().Nonce+"-")
	return name
}

// memberName is the first bare argument: a member's name.
func memberName(t *testing.T, d *datadriven.TestData) string {
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			return a.Key
		}
	}
	d.Fatalf(t, "%s needs a member name", d.Cmd)
	return ""
}

func groupArg(t *testing.T, d *datadriven.TestData) string {
	g := "g"
	if d.HasArg("group") {
		d.ScanArgs(t, "group", &g)
	}
	return g
}

// generationArg is generation=N, by default the member's last generation.
func (s *scenario) generationArg(t *testing.T, d *datadriven.TestData, name string) int32 {
	if !d.HasArg("generation") {
		return s.gens[name]
	}
	var g int
	d.ScanArgs(t, "generation", &g)
	return int32(g)
}

func durationArg(t *testing.T, d *datadriven.TestData, key string, def time.Duration) int64 {
	if !d.HasArg(key) {
		return int64(def)
	}
	var v string
	d.ScanArgs(t, key, &v)
	dur, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return int64(dur)
}

// errName names a Kafka error code as Kafka does (kerr's names).
func errName(code int16) string {
	if code == ErrNone {
		return "NONE"
	}
	if err := kerr.ErrorForCode(code); err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			return ke.Message
		}
	}
	return fmt.Sprintf("error %d", code)
}

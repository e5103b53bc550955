package failpoints

// The registry and the HTTP control plane. This file names no failpoint and
// does not import the failpoint library (the backend does), so it costs a
// production binary nothing: there, nothing references it and the linker
// drops it. The failpoint build wires it up in instrumented.go.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// backend is the failpoint library (internal/fpbackend.Lib).
type backend interface {
	// Parse checks a term's syntax without enabling anything.
	Parse(term string) error
	// Enable disables the failpoint (which releases goroutines paused in
	// it) and enables it with term; enabled runs before any evaluation can
	// see the new term.
	Enable(full, term string, enabled func()) error
	Disable(full string)
	Status(full string) (term string, enabled bool)
	// EnabledNames lists the full names enabled in the library.
	EnabledNames() []string
}

// Errors of the registry; the HTTP handler maps them to 404 and 400.
var (
	ErrUnknown = errors.New("unknown failpoint")
	ErrBadTerm = errors.New("bad failpoint term")
)

type entry struct {
	def  Def
	full string
	hits atomic.Uint64
}

type registry struct {
	be  backend
	ctl sync.Mutex // serializes Enable/Disable

	mu      sync.RWMutex
	entries map[string]*entry // by short and by full name
	sorted  []*entry
	unknown map[string]*atomic.Uint64 // Hit with an unregistered name
}

func newRegistry(be backend) *registry {
	return &registry{be: be, entries: map[string]*entry{}, unknown: map[string]*atomic.Uint64{}}
}

var (
	shortNameRE = regexp.MustCompile(`^[a-z0-9_.-]+(/[a-z0-9_.-]+)*/[A-Za-z][A-Za-z0-9_.-]*$`)
	// <term> :: [<p>%][<n>*]<action>[(<value>)]
	modsRE   = regexp.MustCompile(`^(?:[0-9]+(?:\.[0-9]*)?%|[0-9]+\*)*`)
	actionRE = regexp.MustCompile(`^(off|return|sleep|panic|print|pause|break)(\(.*\))?$`)
)

func (r *registry) register(defs ...Def) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range defs {
		if strings.HasPrefix(d.Name, Module+"/") {
			return fmt.Errorf("failpoints: register %q: use the short name %q", d.Name, ShortName(d.Name))
		}
		if !shortNameRE.MatchString(d.Name) {
			return fmt.Errorf("failpoints: register %q: want <package path in the module>/<marker name>", d.Name)
		}
		if d.Place == "" || d.Effect == "" {
			return fmt.Errorf("failpoints: register %q: Place and Effect are required", d.Name)
		}
		if _, dup := r.entries[d.Name]; dup {
			return fmt.Errorf("failpoints: %q registered twice", d.Name)
		}
		e := &entry{def: d, full: FullName(d.Name)}
		r.entries[d.Name] = e
		r.entries[e.full] = e
		r.sorted = append(r.sorted, e)
	}
	sort.Slice(r.sorted, func(i, j int) bool { return r.sorted[i].def.Name < r.sorted[j].def.Name })
	return nil
}

func (r *registry) lookup(name string) (*entry, error) {
	r.mu.RLock()
	e := r.entries[strings.Trim(name, "/")]
	r.mu.RUnlock()
	if e == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return e, nil
}

// hit counts one firing of a marker body.
func (r *registry) hit(name string) {
	r.mu.RLock()
	e := r.entries[name]
	r.mu.RUnlock()
	if e != nil {
		e.hits.Add(1)
		return
	}
	r.mu.Lock()
	c := r.unknown[name]
	if c == nil {
		c = new(atomic.Uint64)
		r.unknown[name] = c
		fmt.Fprintf(os.Stderr, "vdl failpoints: Hit(%q): no such registered failpoint (marker and registry disagree)\n", name)
	}
	r.mu.Unlock()
	c.Add(1)
}

func (r *registry) info(e *entry) Info {
	term, on := r.be.Status(e.full)
	return Info{Name: e.def.Name, FullName: e.full, Place: e.def.Place, Effect: e.def.Effect,
		Enabled: on, Term: term, Hits: e.hits.Load()}
}

func (r *registry) list() []Info {
	r.mu.RLock()
	es := append([]*entry(nil), r.sorted...)
	r.mu.RUnlock()
	out := make([]Info, len(es))
	for i, e := range es {
		out[i] = r.info(e)
	}
	return out
}

// validateTerm checks a term before it reaches the library: its syntax, and
// what the library would accept but never do (a sleep without a duration,
// the "break" action that execs a debugger).
func (r *registry) validateTerm(term string) error {
	if term == "" {
		return fmt.Errorf("%w: empty term (to disable, use DELETE)", ErrBadTerm)
	}
	if err := r.be.Parse(term); err != nil {
		return fmt.Errorf("%w %q: %v; want [p%%][n*]action[(value)] chained with ->, actions off, return, sleep, panic, print, pause", ErrBadTerm, term, err)
	}
	for _, t := range splitChain(term) {
		t = t[len(modsRE.FindString(t)):]
		if !actionRE.MatchString(t) {
			return fmt.Errorf("%w %q: %q has no action; want [p%%][n*]action[(value)], actions off, return, sleep, panic, print, pause", ErrBadTerm, term, t)
		}
		switch {
		case strings.HasPrefix(t, "break"):
			return fmt.Errorf("%w %q: the break action is not supported", ErrBadTerm, term)
		case strings.HasPrefix(t, "sleep"):
			v := strings.TrimSuffix(strings.TrimPrefix(t[len("sleep"):], "("), ")")
			if _, err := fmt.Sscanf(v, "%d", new(int)); err == nil && !strings.HasPrefix(v, "\"") {
				continue
			}
			var s string
			if _, err := fmt.Sscanf(v, "%q", &s); err == nil {
				if _, err := time.ParseDuration(s); err == nil {
					continue
				}
			}
			return fmt.Errorf("%w %q: sleep needs milliseconds or a duration: sleep(100), sleep(\"1.5s\")", ErrBadTerm, term)
		}
	}
	return nil
}

// splitChain splits a term chain at the "->" outside quoted values.
func splitChain(s string) []string {
	var out []string
	start, inq := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && inq:
			i++
		case s[i] == '"':
			inq = !inq
		case !inq && strings.HasPrefix(s[i:], "->"):
			out = append(out, s[start:i])
			start = i + 2
			i++
		}
	}
	return append(out, s[start:])
}

// enable enables name with term. It always disables first, so re-enabling
// a failpoint that goroutines are paused in never deadlocks (the library's
// Enable would wait for them while they wait for a Disable). enabled, if not
// nil, runs before any evaluation can see the new term.
func (r *registry) enable(name, term string, enabled func()) error {
	e, err := r.lookup(name)
	if err != nil {
		return err
	}
	term = strings.TrimSpace(term)
	if err := r.validateTerm(term); err != nil {
		return err
	}
	r.ctl.Lock()
	defer r.ctl.Unlock()
	if err := r.be.Enable(e.full, term, enabled); err != nil {
		return fmt.Errorf("%w %q: %v", ErrBadTerm, term, err)
	}
	return nil
}

func (r *registry) disable(name string) error {
	e, err := r.lookup(name)
	if err != nil {
		return err
	}
	r.ctl.Lock()
	defer r.ctl.Unlock()
	r.be.Disable(e.full)
	return nil
}

// startupCheck reports failpoints enabled in the library (by GO_FAILPOINTS,
// read by the library's init) that are not registered: a misspelled name
// would otherwise never fire.
func (r *registry) startupCheck() error {
	var bad []string
	for _, full := range r.be.EnabledNames() {
		r.mu.RLock()
		e := r.entries[full]
		short := r.entries[strings.Trim(full, "/")]
		r.mu.RUnlock()
		if e != nil && e.full == full {
			continue
		}
		msg := fmt.Sprintf("%q", full)
		if short != nil {
			msg += fmt.Sprintf(" (GO_FAILPOINTS takes full names: %s)", short.full)
		}
		bad = append(bad, msg)
	}
	if len(bad) > 0 {
		return fmt.Errorf("GO_FAILPOINTS names unknown failpoints: %s (this binary has %d registered; list them at %s)",
			strings.Join(bad, ", "), len(r.list()), Prefix)
	}
	return nil
}

// HeaderName is set on every control-plane response, so a client can tell
// "unknown failpoint" (404 with it) from "no control plane" (404 without).
const HeaderName = "X-Vdl-Failpoints"

type errorBody struct {
	Error string `json:"error"`
}

func (r *registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set(HeaderName, "1")
	name := strings.Trim(strings.TrimPrefix(req.URL.Path, Prefix), "/")
	if name == "" {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			httpError(w, http.StatusMethodNotAllowed, "method not allowed on the list; use PUT/DELETE on "+Prefix+"/<name>")
			return
		}
		infos := r.list()
		if wantsJSON(req) {
			writeJSON(w, http.StatusOK, infos)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeTable(w, infos)
		return
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		e, err := r.lookup(name)
		if err != nil {
			httpError(w, http.StatusNotFound, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, r.info(e))
	case http.MethodPut, http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(req.Body, 4096))
		if err != nil {
			httpError(w, http.StatusBadRequest, "reading the term: "+err.Error())
			return
		}
		// The response is sent before the new term can fire, so a client
		// enabling a crash on a hot path still gets its 204.
		err = r.enable(name, string(body), func() {
			w.WriteHeader(http.StatusNoContent)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		})
		switch {
		case errors.Is(err, ErrUnknown):
			httpError(w, http.StatusNotFound, err.Error())
		case err != nil:
			httpError(w, http.StatusBadRequest, err.Error())
		}
	case http.MethodDelete:
		if err := r.disable(name); err != nil {
			httpError(w, http.StatusNotFound, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		httpError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

func wantsJSON(req *http.Request) bool {
	return req.URL.Query().Get("format") == "json" || strings.Contains(req.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

// writeTable writes infos as an aligned text table.
func writeTable(w io.Writer, infos []Info) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTERM\tHITS\tPLACE\tEFFECT")
	for _, in := range infos {
		term := in.Term
		if !in.Enabled {
			term = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", in.Name, term, in.Hits, in.Place, in.Effect)
	}
	_ = tw.Flush()
}

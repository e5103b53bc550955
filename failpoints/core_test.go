package failpoints

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pingcap/failpoint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/failpoints/internal/fpbackend"
)

// In-process tests of the registry and handler with the real library (the
// markers are simulated with failpoint.Eval, which is what a rewritten
// marker calls). Names are unique to this file: the library is process-wide.

func newTestRegistry(t *testing.T, names ...string) (*registry, *httptest.Server, *Client) {
	t.Helper()
	r := newRegistry(fpbackend.Lib{})
	for _, n := range names {
		require.NoError(t, r.register(Def{Name: n, Place: "place of " + n, Effect: "effect of " + n}))
		t.Cleanup(func() { _ = failpoint.Disable(FullName(n)) })
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, r)
	mux.Handle(Prefix+"/", r)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return r, srv, &Client{BaseURL: srv.URL}
}

// fire does what a rewritten marker does: evaluate, and run the body (which
// calls Hit first) when the evaluation fires.
func fire(r *registry, name string) (failpoint.Value, bool) {
	v, err := failpoint.Eval(FullName(name))
	if err != nil {
		return nil, false
	}
	r.hit(name)
	return v, true
}

func TestRegisterValidates(t *testing.T) {
	r := newRegistry(fpbackend.Lib{})
	require.NoError(t, r.register(Def{Name: "storage/beforeSync", Place: "p", Effect: "e"}))
	assert.ErrorContains(t, r.register(Def{Name: "storage/beforeSync", Place: "p", Effect: "e"}), "twice")
	assert.ErrorContains(t, r.register(Def{Name: Module + "/storage/x", Place: "p", Effect: "e"}), "short name")
	assert.ErrorContains(t, r.register(Def{Name: "noPackage", Place: "p", Effect: "e"}), "want <package path")
	assert.ErrorContains(t, r.register(Def{Name: "storage/y", Effect: "e"}), "required")
	e, err := r.lookup(Module + "/storage/beforeSync")
	require.NoError(t, err)
	assert.Equal(t, "storage/beforeSync", e.def.Name)
	_, err = r.lookup("storage/beforeSynk")
	assert.ErrorIs(t, err, ErrUnknown)
}

func TestValidateTerm(t *testing.T) {
	r := newRegistry(fpbackend.Lib{})
	for _, ok := range []string{"off", "return", "return(true)", `return("a->b")`, "return(2)", "sleep(100)",
		`sleep("1.5s")`, "panic", "print", "pause", "50%return(1)", "1*return(true)->off", "2*sleep(10)->pause", "25.5%3*print"} {
		assert.NoError(t, r.validateTerm(ok), ok)
	}
	for _, bad := range []string{"", "retrun(true)", "return(", "sleep", "sleep(true)", `sleep("soon")`, "break",
		"return(1)->", "return(1)x", "1*->off", "return(true", `return("x`, "return(1"} {
		err := r.validateTerm(bad)
		assert.ErrorIs(t, err, ErrBadTerm, bad)
	}
	assert.Equal(t, []string{"1*return(true)", `return("x->y")`, "off"}, splitChain(`1*return(true)->return("x->y")->off`))
}

func TestHandlerEnableFireHitsDisable(t *testing.T) {
	const name = "failpoints/coretest/ioError"
	r, srv, c := newTestRegistry(t, name)

	// Not enabled: does not fire.
	_, fired := fire(r, name)
	assert.False(t, fired)

	require.NoError(t, c.Enable(name, "2*return(true)->off"))
	in, err := c.Get(name)
	require.NoError(t, err)
	assert.True(t, in.Enabled)
	assert.Equal(t, "2*return(true)->off", in.Term)
	assert.Equal(t, FullName(name), in.FullName)

	v, fired := fire(r, name)
	require.True(t, fired)
	assert.True(t, Bool(v))
	v, fired = fire(r, name)
	require.True(t, fired)
	assert.True(t, Bool(v))
	// "off" fires with a nil value: a hit, and Bool(nil) is false.
	v, fired = fire(r, name)
	require.True(t, fired)
	assert.Nil(t, v)
	assert.False(t, Bool(v))

	infos, err := c.List()
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, uint64(3), infos[0].Hits)
	assert.Equal(t, "place of "+name, infos[0].Place)

	require.NoError(t, c.Disable(name))
	_, fired = fire(r, name)
	assert.False(t, fired)
	in, err = c.Get(name)
	require.NoError(t, err)
	assert.False(t, in.Enabled)
	assert.Empty(t, in.Term)
	assert.Equal(t, uint64(3), in.Hits, "hits survive a disable")

	// Text listing when the client does not ask for JSON.
	resp, err := http.Get(srv.URL + Prefix)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "NAME")
	assert.Contains(t, string(body), name)
}

func TestHandlerErrors(t *testing.T) {
	const name = "failpoints/coretest/errs"
	_, srv, c := newTestRegistry(t, name)

	err := c.Enable("failpoints/coretest/errz", "return(true)")
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.ErrorIs(t, err, ErrUnknown)
	assert.Contains(t, err.Error(), `unknown failpoint "failpoints/coretest/errz"`)

	err = c.Enable(name, "retrun(true)")
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.ErrorIs(t, err, ErrBadTerm)
	assert.Contains(t, err.Error(), "retrun(true)")
	_, err = failpoint.Status(FullName(name))
	assert.Error(t, err, "a rejected term must not enable anything")

	assert.ErrorIs(t, c.Disable("nope/nope"), ErrUnknown)
	_, err = c.Get("nope/nope")
	assert.ErrorIs(t, err, ErrUnknown)

	req, _ := http.NewRequest(http.MethodPatch, srv.URL+Prefix+"/"+name, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// A server without the control plane: ErrNoControlPlane, not "unknown".
	bare := httptest.NewServer(http.NotFoundHandler())
	defer bare.Close()
	_, err = (&Client{BaseURL: strings.TrimPrefix(bare.URL, "http://")}).List()
	assert.ErrorIs(t, err, ErrNoControlPlane)
}

// The library's Enable on a failpoint that goroutines are paused in waits
// for them forever; the control plane disables first.
func TestReenablePausedDoesNotDeadlock(t *testing.T) {
	const name = "failpoints/coretest/pause"
	r, _, c := newTestRegistry(t, name)
	require.NoError(t, c.Enable(name, "pause"))

	released := make(chan failpoint.Value, 2)
	for i := 0; i < 2; i++ {
		go func() {
			v, _ := fire(r, name)
			released <- v
		}()
	}
	select {
	case <-released:
		t.Fatal("a paused failpoint returned while still enabled")
	case <-time.After(100 * time.Millisecond):
	}

	done := make(chan error, 1)
	go func() { done <- c.Enable(name, "return(7)") }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("re-enabling a paused failpoint deadlocked")
	}
	for i := 0; i < 2; i++ {
		select {
		case v := <-released:
			assert.Nil(t, v, "pause releases the body with a nil value")
		case <-time.After(5 * time.Second):
			t.Fatal("paused goroutine not released")
		}
	}
	v, fired := fire(r, name)
	require.True(t, fired)
	n, ok := Int(v)
	assert.True(t, ok)
	assert.Equal(t, 7, n)
	in, err := c.Get(name)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), in.Hits)
}

func TestStartupCheck(t *testing.T) {
	r := newRegistry(fpbackend.Lib{})
	require.NoError(t, r.register(Def{Name: "failpoints/coretest/startup", Place: "p", Effect: "e"}))
	full := FullName("failpoints/coretest/startup")
	// What the library's init does with GO_FAILPOINTS.
	require.NoError(t, failpoint.Enable(full, "return(true)"))
	defer func() { _ = failpoint.Disable(full) }()
	// Other tests' names are enabled in this process too: look at ours only.
	err := r.startupCheck()
	if err != nil {
		assert.NotContains(t, err.Error(), `"`+full+`"`)
	}

	require.NoError(t, failpoint.Enable(Module+"/failpoints/coretest/startupp", "return(true)"))
	require.NoError(t, failpoint.Enable("failpoints/coretest/startup", "return(true)"))
	defer func() {
		_ = failpoint.Disable(Module + "/failpoints/coretest/startupp")
		_ = failpoint.Disable("failpoints/coretest/startup")
	}()
	err = r.startupCheck()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"`+Module+`/failpoints/coretest/startupp"`)
	assert.Contains(t, err.Error(), "GO_FAILPOINTS takes full names: "+full)
}

func TestHitUnknownCounted(t *testing.T) {
	r := newRegistry(fpbackend.Lib{})
	r.hit("failpoints/coretest/unregistered")
	r.hit("failpoints/coretest/unregistered")
	assert.Equal(t, uint64(2), r.unknown["failpoints/coretest/unregistered"].Load())
}

func TestInfoJSON(t *testing.T) {
	b, err := json.Marshal(Info{Name: "a/b", Term: "1*return(1)->off"})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"name":"a/b"`)
}

func TestEffects(t *testing.T) {
	assert.ErrorIs(t, IOError(), ErrIO)
	p, ok := Peer("2")
	assert.True(t, ok)
	assert.Equal(t, uint64(2), p)
	assert.True(t, IsPeer(3, 3))
	assert.False(t, IsPeer(nil, 3))
	assert.False(t, IsPeer(true, 1))
	assert.True(t, IsPeer("1,3", 3), "one side of a partition: a list")
	assert.True(t, IsPeer("1, 3", 1))
	assert.False(t, IsPeer("1,3", 2))
	assert.False(t, IsPeer("0,x", 0))
	assert.False(t, Bool(nil))
	assert.True(t, Bool("true"))
	_, ok = String(nil)
	assert.False(t, ok)
	start := time.Now()
	Sleep(20)
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

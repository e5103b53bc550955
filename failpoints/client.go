package failpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to a VDL process's control plane over its admin HTTP. It is
// what tests, campaigns and vdlctl use.
type Client struct {
	// BaseURL is the admin HTTP address: "http://127.0.0.1:9090" or just
	// "127.0.0.1:9090".
	BaseURL string
	// HTTP is the client to use; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// ErrNoControlPlane: the server answered 404 without being the control
// plane: a production build, or not a VDL admin address.
var ErrNoControlPlane = errors.New("no failpoint control plane (a production build?)")

// APIError is an error answer of the control plane. It wraps ErrUnknown for
// a 404 and ErrBadTerm for a 400, so errors.Is works on the client side too.
type APIError struct {
	StatusCode int
	Message    string
}

func (e *APIError) Error() string { return e.Message }

// Unwrap maps the status to the registry's errors.
func (e *APIError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusNotFound:
		return ErrUnknown
	case http.StatusBadRequest:
		return ErrBadTerm
	}
	return nil
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

func (c *Client) url(name string) string {
	base := strings.TrimRight(c.BaseURL, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := base + Prefix
	if name != "" {
		parts := strings.Split(strings.Trim(name, "/"), "/")
		for i := range parts {
			parts[i] = url.PathEscape(parts[i])
		}
		u += "/" + strings.Join(parts, "/")
	}
	return u
}

func (c *Client) do(method, name, body string, out any) error {
	req, err := http.NewRequest(method, c.url(name), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "text/plain")
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.Header.Get(HeaderName) == "" && resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s %s: %w", method, req.URL, ErrNoControlPlane)
	}
	if resp.StatusCode >= 300 {
		var eb errorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(data))
		}
		return &APIError{StatusCode: resp.StatusCode, Message: fmt.Sprintf("%s (HTTP %d)", eb.Error, resp.StatusCode)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, req.URL, err)
		}
	}
	return nil
}

// List returns every failpoint compiled into the server.
func (c *Client) List() ([]Info, error) {
	var out []Info
	err := c.do(http.MethodGet, "", "", &out)
	return out, err
}

// Get returns one failpoint (short or full name).
func (c *Client) Get(name string) (Info, error) {
	var out Info
	err := c.do(http.MethodGet, name, "", &out)
	return out, err
}

// Enable sets name's term, e.g. "return(true)", "1*sleep(100)", "pause".
func (c *Client) Enable(name, term string) error {
	return c.do(http.MethodPut, name, term, nil)
}

// Disable turns name off (releasing goroutines paused in it).
func (c *Client) Disable(name string) error {
	return c.do(http.MethodDelete, name, "", nil)
}

package configserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
)

// Client talks to the config servers: it tries each address until one
// answers (followers redirect to the leader, which the HTTP client
// follows), and maps the API's errors back to this package's sentinels.
type Client struct {
	addrs  []string // host:port
	scheme string
	http   *http.Client

	mu   sync.Mutex
	last int // the address that answered last
}

// NewClient returns a client of the config servers at addrs (host:port),
// over HTTPS if secure; hc carries the TLS configuration and credentials
// (nil: no credentials).
func NewClient(addrs []string, secure bool, hc *http.Client) *Client {
	c := &Client{addrs: addrs, scheme: "http", http: hc}
	if hc == nil {
		c.http = &http.Client{}
	}
	if secure {
		c.scheme = "https"
	}
	return c
}

// APIError is an error answer of the API.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

// Unwrap maps the status to the package's sentinels.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusBadRequest:
		return ErrInvalid
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		if bytes.Contains([]byte(e.Msg), []byte(ErrPlacement.Error())) {
			return ErrPlacement
		}
		if bytes.Contains([]byte(e.Msg), []byte(ErrMembership.Error())) {
			return ErrMembership
		}
		return ErrExists
	case http.StatusServiceUnavailable, http.StatusTemporaryRedirect:
		return ErrNotLeader
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	c.mu.Lock()
	first := c.last
	c.mu.Unlock()
	var errs []error
	for i := range c.addrs {
		k := (first + i) % len(c.addrs)
		err := c.once(ctx, method, c.scheme+"://"+c.addrs[k]+path, body, out)
		var api *APIError
		if err == nil || errors.As(err, &api) && api.Status != http.StatusServiceUnavailable {
			c.mu.Lock()
			c.last = k
			c.mu.Unlock()
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no config server answered: %w", errors.Join(errs...))
}

func (c *Client) once(ctx context.Context, method, u string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return &APIError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Report sends a server's report and returns its assignment.
func (c *Client) Report(ctx context.Context, r Report) (a Assignment, err error) {
	return a, c.do(ctx, http.MethodPost, "/v1/report", r, &a)
}

// CreateStream creates a stream.
func (c *Client) CreateStream(ctx context.Context, spec StreamSpec) (st Stream, err error) {
	return st, c.do(ctx, http.MethodPost, "/v1/streams", spec, &st)
}

// DeleteStream deletes a stream.
func (c *Client) DeleteStream(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/streams/"+url.PathEscape(name), nil, nil)
}

// AlterStream changes a stream's retention or preferred DC.
func (c *Client) AlterStream(ctx context.Context, name string, ch StreamChange) (st Stream, err error) {
	return st, c.do(ctx, http.MethodPatch, "/v1/streams/"+url.PathEscape(name), ch, &st)
}

// Streams lists the streams (deleted ones still stopping included).
func (c *Client) Streams(ctx context.Context) (out []StreamStatus, err error) {
	return out, c.do(ctx, http.MethodGet, "/v1/streams", nil, &out)
}

// Stream describes an active stream.
func (c *Client) Stream(ctx context.Context, name string) (st StreamStatus, err error) {
	return st, c.do(ctx, http.MethodGet, "/v1/streams/"+url.PathEscape(name), nil, &st)
}

// Cluster is the cluster's status.
func (c *Client) Cluster(ctx context.Context) (cs ClusterStatus, err error) {
	return cs, c.do(ctx, http.MethodGet, "/v1/cluster", nil, &cs)
}

// Ops is the newest n operations of the history.
func (c *Client) Ops(ctx context.Context, n int) (ops []Op, err error) {
	return ops, c.do(ctx, http.MethodGet, "/v1/ops?n="+strconv.Itoa(n), nil, &ops)
}

// Moves lists the moves (the latest of each stream).
func (c *Client) Moves(ctx context.Context) (out []MoveStatus, err error) {
	return out, c.do(ctx, http.MethodGet, "/v1/moves", nil, &out)
}

// StartMove starts moving a stream's replica (To 0: placement chooses).
func (c *Client) StartMove(ctx context.Context, r MoveRequest) (m Move, err error) {
	return m, c.do(ctx, http.MethodPost, "/v1/moves", r, &m)
}

// CancelMove asks for a stream's active move to be undone.
func (c *Client) CancelMove(ctx context.Context, stream string) (m Move, err error) {
	return m, c.do(ctx, http.MethodPost, "/v1/moves/"+url.PathEscape(stream)+"/cancel", nil, &m)
}

// Balancer is the balancer's status.
func (c *Client) Balancer(ctx context.Context) (b BalancerStatus, err error) {
	return b, c.do(ctx, http.MethodGet, "/v1/balancer", nil, &b)
}

// SetServerState drains a server (no new replicas on it) or activates it.
func (c *Client) SetServerState(ctx context.Context, id uint64, state string) error {
	action := "activate"
	if state == ServerDraining {
		action = "drain"
	}
	return c.do(ctx, http.MethodPost, "/v1/servers/"+strconv.FormatUint(id, 10)+"/"+action, nil, nil)
}

// ConfigServers lists the config servers: their role in the group and
// health as the leader sees them.
func (c *Client) ConfigServers(ctx context.Context) (cs ConfigServers, err error) {
	return cs, c.do(ctx, http.MethodGet, "/v1/configservers", nil, &cs)
}

// RemoveConfigServer removes a config server from the config servers' group.
func (c *Client) RemoveConfigServer(ctx context.Context, id uint64) error {
	return c.do(ctx, http.MethodPost, "/v1/configservers/"+strconv.FormatUint(id, 10)+"/remove", nil, nil)
}

// AddConfigServer adds a config server to the group (a learner, promoted
// once caught up).
func (c *Client) AddConfigServer(ctx context.Context, id uint64) error {
	return c.do(ctx, http.MethodPost, "/v1/configservers/"+strconv.FormatUint(id, 10)+"/add", nil, nil)
}

// TransferConfigLeader hands the config servers' leadership to id.
func (c *Client) TransferConfigLeader(ctx context.Context, id uint64) error {
	return c.do(ctx, http.MethodPost, "/v1/configservers/"+strconv.FormatUint(id, 10)+"/transfer-leader", nil, nil)
}

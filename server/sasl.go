package server

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vdl-project/vdl/internal/users"
	"github.com/vdl-project/vdl/kafka"
)

// SASLConfig makes Kafka clients authenticate (docs/security.md). Users
// and their SCRAM credentials are in UsersFile (`vdl user add` writes it;
// the server rereads it when it changes). An authenticated user may
// produce to and consume from every stream and join any group: there are
// no ACLs.
type SASLConfig struct {
	UsersFile string `toml:"users_file"`
	// Mechanisms offered; default SCRAM-SHA-512, SCRAM-SHA-256, PLAIN.
	// PLAIN is never offered on the plain-text listener (the password
	// would cross the network in clear).
	Mechanisms []string `toml:"mechanisms"`
	// Listeners that require SASL: "tls" (the default) and/or "plain".
	Listeners []string `toml:"listeners"`
}

const mechPlain = "PLAIN"

func (c *Config) validateSASL() []error {
	sc := &c.SASL
	if sc.UsersFile == "" {
		if len(sc.Mechanisms) > 0 || len(sc.Listeners) > 0 {
			return []error{errors.New("sasl: mechanisms and listeners need users_file")}
		}
		return nil
	}
	var errs []error
	if len(sc.Mechanisms) == 0 {
		sc.Mechanisms = []string{users.ScramSHA512, users.ScramSHA256, mechPlain}
	}
	for _, m := range sc.Mechanisms {
		if !slices.Contains([]string{users.ScramSHA256, users.ScramSHA512, mechPlain}, m) {
			errs = append(errs, fmt.Errorf("sasl: mechanism %q: want SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", m))
		}
	}
	if len(sc.Listeners) == 0 {
		sc.Listeners = []string{"tls"}
	}
	for _, l := range sc.Listeners {
		switch l {
		case "tls":
			if c.KafkaTLSListen == "" {
				errs = append(errs, errors.New("sasl: listener tls needs kafka_tls_listen"))
			}
		case "plain":
		default:
			errs = append(errs, fmt.Errorf("sasl: listener %q: want tls or plain", l))
		}
	}
	return errs
}

// saslOn returns the authenticator of a listener ("tls" or "plain"), nil
// if its clients need not authenticate.
func (s *Server) saslOn(listener string) kafka.Authenticator {
	sc := s.cfg.SASL
	if s.users == nil || !slices.Contains(sc.Listeners, listener) {
		return nil
	}
	mechs := slices.Clone(sc.Mechanisms)
	if listener == "plain" {
		mechs = slices.DeleteFunc(mechs, func(m string) bool { return m == mechPlain })
	}
	return &authenticator{users: s.users, mechs: mechs, log: s.log.With("listener", "kafka-"+listener)}
}

// userStore is the users file, reread when it changes on disk.
type userStore struct {
	path string
	log  *slog.Logger

	mu   sync.Mutex
	file *users.File
	mod  time.Time
	size int64
}

func openUserStore(path string, log *slog.Logger) (*userStore, error) {
	u := &userStore{path: path, log: log}
	if _, err := u.current(); err != nil {
		return nil, err
	}
	return u, nil
}

// current returns the users, reloading the file if it changed. A file that
// became invalid keeps the last good users (and is logged).
func (u *userStore) current() (*users.File, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fi, err := os.Stat(u.path)
	if err != nil {
		if u.file != nil {
			u.log.Error("users file unreadable: keeping the users loaded before", "file", u.path, "err", err)
			return u.file, nil
		}
		return nil, fmt.Errorf("sasl: %w", err)
	}
	if u.file != nil && fi.ModTime().Equal(u.mod) && fi.Size() == u.size {
		return u.file, nil
	}
	f, err := users.Load(u.path)
	if err != nil {
		if u.file != nil {
			u.log.Error("users file invalid: keeping the users loaded before", "err", err)
			return u.file, nil
		}
		return nil, fmt.Errorf("sasl: %w", err)
	}
	if u.file != nil {
		u.log.Info("users file reloaded", "file", u.path, "users", len(f.Users))
	}
	u.file, u.mod, u.size = f, fi.ModTime(), fi.Size()
	return f, nil
}

// authenticator is one Kafka listener's kafka.Authenticator.
type authenticator struct {
	users *userStore
	mechs []string
	log   *slog.Logger
}

func (a *authenticator) Mechanisms() []string { return a.mechs }

func (a *authenticator) Start(mechanism string) (kafka.SASLExchange, error) {
	if !slices.Contains(a.mechs, mechanism) {
		return nil, fmt.Errorf("mechanism %q is not offered", mechanism)
	}
	f, err := a.users.current()
	if err != nil {
		return nil, err
	}
	if mechanism == mechPlain {
		return &plainExchange{users: f, log: a.log}, nil
	}
	conv, err := f.NewConversation(mechanism)
	if err != nil {
		return nil, err
	}
	return &scramExchange{conv: conv, log: a.log}, nil
}

// errBadCredentials is what a client is told, whatever was wrong: which
// users exist is not its business.
var errBadCredentials = errors.New("invalid credentials")

// scramExchange is a SCRAM conversation (users.Conversation).
type scramExchange struct {
	conv *users.Conversation
	log  *slog.Logger
}

func (x *scramExchange) Step(msg []byte) ([]byte, bool, error) {
	answer, done, err := x.conv.Step(string(msg))
	if err != nil {
		x.log.Warn("SASL authentication failed", "reason", err)
		return nil, false, errBadCredentials
	}
	return []byte(answer), done, nil
}

func (x *scramExchange) User() string { return x.conv.User() }

// plainExchange is SASL/PLAIN (RFC 4616): one message, authzid NUL
// authcid NUL password.
type plainExchange struct {
	users *users.File
	log   *slog.Logger
	user  string
}

func (x *plainExchange) Step(msg []byte) ([]byte, bool, error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return nil, false, errors.New("malformed PLAIN message")
	}
	authz, name, pass := string(parts[0]), string(parts[1]), string(parts[2])
	if authz != "" && authz != name {
		return nil, false, errors.New("PLAIN: acting as another user is not supported")
	}
	if err := x.users.CheckPassword(name, pass); err != nil {
		x.log.Warn("SASL authentication failed", "mechanism", mechPlain, "user", name, "reason", err)
		return nil, false, errBadCredentials
	}
	x.user = name
	return nil, true, nil
}

func (x *plainExchange) User() string { return x.user }

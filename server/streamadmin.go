package server

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/kafka"
)

// adminBackend is the Kafka backend of a server with config servers: it
// also creates and deletes streams (CreateTopics, DeleteTopics), through
// the config servers.
type adminBackend struct {
	*Backend
	s *Server
}

var _ kafka.StreamAdmin = adminBackend{}

// CreateStreams creates the streams through the config servers, then has
// this server report at once, so its Metadata knows them when it answers.
func (b adminBackend) CreateStreams(reqs []kafka.CreateStream, done func([]error)) {
	go func() {
		errs := make([]error, len(reqs))
		ctx, cancel := context.WithTimeout(b.s.ctx, 30*time.Second)
		defer cancel()
		var created []string
		for i, r := range reqs {
			spec := configserver.StreamSpec{Name: r.Name, ReplicationFactor: r.ReplicationFactor, PreferredDC: r.PreferredDC,
				RetentionMs: r.RetentionMs, RetentionBytes: r.RetentionBytes}
			if err := configserver.ValidateName(r.Name); err != nil {
				errs[i] = &kafka.AdminError{Code: kerr.InvalidTopicException.Code, Msg: err.Error()}
				continue
			}
			_, err := b.s.control.client.CreateStream(ctx, spec)
			errs[i] = adminError(err, kerr.InvalidConfig.Code)
			if err == nil {
				created = append(created, r.Name)
			}
		}
		if len(created) > 0 {
			b.s.control.reportNow(5 * time.Second)
			b.waitLed(ctx, created)
		}
		done(errs)
	}()
}

// waitLed waits, at most 2.5 s (within the 3 s request timeout some
// clients default to, sarama's), until the config servers have heard of a
// leader for each new stream: its replicas founded it then, so Metadata on
// them names it, and a client producing right after CreateTopics finds it
// (Kafka too answers once the topic is ready).
func (b adminBackend) waitLed(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	for _, name := range names {
		for ctx.Err() == nil {
			if st, err := b.s.control.client.Stream(ctx, name); err == nil && st.Leader != 0 {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// DeleteStreams deletes the streams through the config servers.
func (b adminBackend) DeleteStreams(names []string, done func([]error)) {
	go func() {
		errs := make([]error, len(names))
		ctx, cancel := context.WithTimeout(b.s.ctx, 30*time.Second)
		defer cancel()
		deleted := false
		for i, name := range names {
			err := b.s.control.client.DeleteStream(ctx, name)
			errs[i] = adminError(err, kerr.InvalidRequest.Code)
			deleted = deleted || err == nil
		}
		if deleted {
			b.s.control.reportNow(5 * time.Second)
		}
		done(errs)
	}()
}

// adminError maps a config server's answer to a Kafka error code; invalid
// is the code of a request the config servers call invalid (a create: its
// configs, the name and replication factor being checked before; a delete:
// an internal stream).
func adminError(err error, invalid int16) error {
	code := kerr.UnknownServerError.Code
	switch {
	case err == nil:
		return nil
	case errors.Is(err, configserver.ErrExists):
		code = kerr.TopicAlreadyExists.Code
	case errors.Is(err, configserver.ErrNotFound):
		code = kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, configserver.ErrPlacement):
		code = kerr.InvalidReplicationFactor.Code
	case errors.Is(err, configserver.ErrInvalid):
		code = invalid
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, configserver.ErrNotLeader):
		code = kerr.RequestTimedOut.Code
	}
	return &kafka.AdminError{Code: code, Msg: err.Error()}
}

package server

import (
	"net"
	"strconv"

	"github.com/vdl-project/vdl/kafka"
)

// catalog is the server's Catalog: the configured peers and streams.
type catalog struct{ s *Server }

func (c catalog) Brokers() []kafka.Broker {
	var out []kafka.Broker
	for _, p := range c.s.cfg.Peers {
		host, port, err := net.SplitHostPort(p.Kafka)
		if err != nil {
			continue
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			continue
		}
		br := kafka.Broker{NodeID: int32(p.ID), Host: host, Port: int32(n)}
		if p.DC != "" {
			br.Rack = new(p.DC)
		}
		out = append(out, br)
	}
	return out
}

func (c catalog) Streams() []string {
	var names []string
	for _, sc := range c.s.cfg.Streams {
		names = append(names, sc.Name)
	}
	return sortedStrings(names)
}

func (c catalog) Stream(name string) (StreamRef, bool) {
	sc, ok := c.s.streamConfig(name)
	if !ok {
		return StreamRef{}, false
	}
	ref := StreamRef{Group: sc.ID, Replicas: sc.Replicas}
	if st, hosted := c.s.stream(name); hosted {
		ref.Log = st.log
		if voters, learners, ok := c.s.membership(sc.ID); ok { // the group's own view
			ref.Replicas = append(voters, learners...)
		}
	}
	return ref, true
}

package server

import (
	"net"
	"strconv"

	"github.com/vdl-project/vdl/kafka"
)

// catalog is the server's Catalog: its peers and streams (directory).
type catalog struct{ s *Server }

// Brokers are the peers' plain-text Kafka listeners.
func (c catalog) Brokers() []kafka.Broker {
	return c.brokers(func(p Peer) string { return p.Kafka })
}

// TLSBrokers are the peers' Kafka TLS listeners: what a client of the TLS
// listener is told (a peer without one is left out).
func (c catalog) TLSBrokers() []kafka.Broker {
	return c.brokers(func(p Peer) string { return p.KafkaTLS })
}

func (c catalog) brokers(addr func(Peer) string) []kafka.Broker {
	var out []kafka.Broker
	for _, p := range c.s.dir.Peers() {
		host, port, err := net.SplitHostPort(addr(p))
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
	for _, sc := range c.s.dir.Streams() {
		names = append(names, sc.Name)
	}
	return sortedStrings(names)
}

func (c catalog) Stream(name string) (StreamRef, bool) {
	sc, ok := c.s.streamConfig(name)
	if !ok {
		return StreamRef{}, false
	}
	ref := StreamRef{Group: sc.ID, Replicas: sc.Replicas, Defaults: sc, LeaderHint: c.s.dir.LeaderHint(name)}
	if st, hosted := c.s.stream(name); hosted {
		ref.Log, ref.traffic, ref.floor = st.log, st.traffic, &st.floor
		if voters, learners, ok := c.s.membership(sc.ID); ok { // the group's own view
			ref.Replicas = append(voters, learners...)
		}
	}
	return ref, true
}

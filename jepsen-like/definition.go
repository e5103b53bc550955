package campaign

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Definition is a campaign as a small YAML file (jepsen-like/campaigns/*.yaml),
// beside the script format: it becomes the script
//
//	start-cluster nodes= streams= dcs= net= latency= jitter= loss= disk=
//	nemesis faults= interval= seed=          (if it has faults)
//	workload producers= consumers= kcat-producers= kcat-consumers= duration=
//	check                                    (if it has checks)
//
// For example:
//
//	cluster:
//	  servers: 3
//	  dcs: 3
//	  net: auto               # netns when root, else loopback
//	  latency_ms: [[0, 20, 40], [20, 0, 30], [40, 30, 0]]   # one way, DC to DC
//	  jitter_ms: 2
//	  disk_mib: 48            # size-limited data dirs (the disk-full fault)
//	workload: {producers: 3, consumers: 1, kcat_producers: 1, kcat_consumers: 1}
//	nemesis: {faults: [kill, pause, partition, partition-dc], interval: 2s, seed: 1}
//	duration: 20s
//	checks: [acknowledged, linearizable, anomalies, replicas-agree]
type Definition struct {
	Cluster  ClusterDef  `json:"cluster"`
	Workload WorkloadDef `json:"workload"`
	Nemesis  *NemesisDef `json:"nemesis,omitempty"`
	Duration string      `json:"duration"`
	// Checks are what the final check holds the run to; check does them
	// all, so the list says which the campaign relies on: acknowledged
	// (every acknowledged record at its offset, once), linearizable
	// (porcupine over the history with the final read), anomalies (the
	// Jepsen Kafka taxonomy), replicas-agree (the replicas' ends and high
	// watermarks), replicas-converge (the servers stopped, each replica's
	// log read from its data dir: the committed batches byte-identical;
	// the servers start again). Empty: no check.
	Checks []string `json:"checks"`
}

// ClusterDef is the cluster's shape.
type ClusterDef struct {
	Servers     int         `json:"servers"`
	Streams     int         `json:"streams,omitempty"`
	DCs         int         `json:"dcs,omitempty"`
	Net         string      `json:"net,omitempty"`
	LatencyMs   [][]float64 `json:"latency_ms,omitempty"`
	JitterMs    float64     `json:"jitter_ms,omitempty"`
	LossPercent [][]float64 `json:"loss_percent,omitempty"`
	DiskMiB     int         `json:"disk_mib,omitempty"`
	// ConfigServers runs the control plane (3): config server processes,
	// the servers registering with them, the streams created through
	// them; PreferredDCs are the streams' preferred DCs (dc1, dc2, ...:
	// stream i's at i), BalanceAfterMs the config servers'
	// balance_after_ms (0: theirs, 10 s).
	ConfigServers  int      `json:"config_servers,omitempty"`
	PreferredDCs   []string `json:"preferred_dcs,omitempty"`
	BalanceAfterMs int      `json:"balance_after_ms,omitempty"`
}

// WorkloadDef is the clients.
type WorkloadDef struct {
	Producers     int `json:"producers"`
	Consumers     int `json:"consumers,omitempty"`
	KcatProducers int `json:"kcat_producers,omitempty"`
	KcatConsumers int `json:"kcat_consumers,omitempty"`
	// AllStreams spreads the clients over the streams (the i-th producer
	// on stream i, and so on) instead of all on the first.
	AllStreams bool `json:"all_streams,omitempty"`
}

// NemesisDef is the fault mix.
type NemesisDef struct {
	Faults   []string `json:"faults"`
	Interval string   `json:"interval"`
	Seed     uint64   `json:"seed"`
}

var definitionChecks = []string{"acknowledged", "linearizable", "anomalies", "replicas-agree", "replicas-converge"}

// ParseDefinition reads a YAML definition (unknown fields are errors) and
// returns its script.
func ParseDefinition(r io.Reader) ([]Command, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var d Definition
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return nil, err
	}
	return d.Script()
}

// Script is the definition as script commands.
func (d Definition) Script() ([]Command, error) {
	c := d.Cluster
	if c.Servers <= 0 {
		return nil, fmt.Errorf("cluster.servers: want a positive number")
	}
	start := map[string]string{"nodes": strconv.Itoa(c.Servers), "streams": strconv.Itoa(max(1, c.Streams))}
	if c.DCs > 0 {
		start["dcs"] = strconv.Itoa(c.DCs)
	}
	if c.Net != "" {
		start["net"] = c.Net
	}
	if c.LatencyMs != nil {
		start["latency"] = matrixString(c.LatencyMs)
	}
	if c.JitterMs > 0 {
		start["jitter"] = strconv.FormatFloat(c.JitterMs, 'f', -1, 64)
	}
	if c.LossPercent != nil {
		start["loss"] = matrixString(c.LossPercent)
	}
	if c.DiskMiB > 0 {
		start["disk"] = strconv.Itoa(c.DiskMiB)
	}
	if c.ConfigServers > 0 {
		start["config-servers"] = strconv.Itoa(c.ConfigServers)
	}
	if len(c.PreferredDCs) > 0 {
		if c.ConfigServers == 0 {
			return nil, fmt.Errorf("cluster.preferred_dcs needs cluster.config_servers")
		}
		start["preferred"] = strings.Join(c.PreferredDCs, ",")
	}
	if c.BalanceAfterMs > 0 {
		start["balance-after"] = strconv.Itoa(c.BalanceAfterMs)
	}
	cmds := []Command{{Line: 1, Name: "start-cluster", Keys: start}}
	if n := d.Nemesis; n != nil && len(n.Faults) > 0 {
		for _, f := range n.Faults {
			if !slices.Contains(nemesisFaults, f) {
				return nil, fmt.Errorf("nemesis.faults: %q: want some of %s", f, strings.Join(nemesisFaults, ", "))
			}
		}
		if (slices.Contains(n.Faults, "cs-kill") || slices.Contains(n.Faults, "cs-partition")) && c.ConfigServers == 0 {
			return nil, fmt.Errorf("nemesis.faults: cs-kill and cs-partition need cluster.config_servers")
		}
		if slices.Contains(n.Faults, "disk-full") && c.DiskMiB == 0 {
			return nil, fmt.Errorf("nemesis.faults: disk-full needs cluster.disk_mib")
		}
		cmds = append(cmds, Command{Line: 2, Name: "nemesis", Keys: map[string]string{
			"faults": strings.Join(n.Faults, ","), "interval": n.Interval, "seed": strconv.FormatUint(n.Seed, 10)}})
	}
	if _, err := time.ParseDuration(d.Duration); err != nil {
		return nil, fmt.Errorf("duration: %v", err)
	}
	w := d.Workload
	if w.Producers <= 0 {
		return nil, fmt.Errorf("workload.producers: want a positive number")
	}
	work := map[string]string{"producers": strconv.Itoa(w.Producers), "duration": d.Duration}
	for k, v := range map[string]int{"consumers": w.Consumers, "kcat-producers": w.KcatProducers, "kcat-consumers": w.KcatConsumers} {
		if v > 0 {
			work[k] = strconv.Itoa(v)
		}
	}
	if w.AllStreams {
		work["all-streams"] = "1"
	}
	cmds = append(cmds, Command{Line: 3, Name: "workload", Keys: work})
	for _, ch := range d.Checks {
		if !slices.Contains(definitionChecks, ch) {
			return nil, fmt.Errorf("checks: %q: want some of %s", ch, strings.Join(definitionChecks, ", "))
		}
	}
	if len(d.Checks) > 0 {
		check := Command{Line: 4, Name: "check", Keys: map[string]string{}}
		if slices.Contains(d.Checks, "replicas-converge") {
			check.Keys["converge"] = "1"
		}
		cmds = append(cmds, check)
	}
	return cmds, nil
}

func matrixString(m [][]float64) string {
	rows := make([]string, len(m))
	for i, row := range m {
		cells := make([]string, len(row))
		for j, v := range row {
			cells[j] = strconv.FormatFloat(v, 'f', -1, 64)
		}
		rows[i] = strings.Join(cells, ",")
	}
	return strings.Join(rows, "/")
}

// ParseFile reads a campaign: a YAML definition (.yaml, .yml) or a script.
func ParseFile(name string, r io.Reader) ([]Command, error) {
	if strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") {
		return ParseDefinition(r)
	}
	return Parse(r)
}

// CampaignName is a campaign file's name without its directory and
// extension.
func CampaignName(path string) string {
	base := path[strings.LastIndex(path, "/")+1:]
	for _, ext := range []string{".txt", ".yaml", ".yml"} {
		if s, ok := strings.CutSuffix(base, ext); ok {
			return s
		}
	}
	return base
}

package helmtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// threeZones is the chart's own values file for three zones.
func threeZones(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values-three-zones.yaml"))
	require.NoError(t, err)
	return string(b)
}

// helm lint finds nothing worse than information, with the default values,
// three zones, one zone and TLS off.
func TestLint(t *testing.T) {
	for name, values := range map[string]string{
		"default":     "",
		"three zones": threeZones(t),
		"one zone":    "server: {zones: [zone-a]}",
		"plain text":  "tls: {enabled: false}\nadminToken: {secretName: \"\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(values))
			require.NoError(t, err)
			l := lint.All(chartDir, vals, namespace, false)
			for _, m := range l.Messages {
				assert.Less(t, m.Severity, support.WarningSev, "%s", m)
			}
		})
	}
}

// hostPort splits an address the chart wrote, failing the test on a bad one.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	port, err := strconv.Atoi(p)
	require.NoError(t, err, addr)
	return h, port
}

// podDNS is the name a pod of s gets from its governing headless Service,
// which must exist, be headless and select the pod.
func podDNS(t *testing.T, m manifests, s *appsv1.StatefulSet, pod string) string {
	t.Helper()
	svc, ok := m.services[s.Spec.ServiceName]
	require.True(t, ok, "%s: governing service %q is not rendered", s.Name, s.Spec.ServiceName)
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "%s is not headless", svc.Name)
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)),
		"service %s does not select the pods of %s", svc.Name, s.Name)
	return fmt.Sprintf("%s.%s.%s.svc.cluster.local", pod, svc.Name, namespace)
}

// The config servers: three, each with a TOML that the config server
// accepts, naming itself and its peers by their stable DNS names.
func TestConfigServers(t *testing.T) {
	m := render(t, "")
	cs, ok := m.statefulSets["vdl-config"]
	require.True(t, ok, "no config server StatefulSet; have %v", m.kinds["StatefulSet"])
	require.EqualValues(t, 3, *cs.Spec.Replicas)
	pods := podNames(cs)
	for o, pod := range pods {
		cfg := configServerConfig(t, m, cs, pod)
		assert.EqualValues(t, o+1, cfg.ID)
		host, _ := hostPort(t, cfg.RaftListen)
		assert.Equal(t, podDNS(t, m, cs, pod), host)
		require.Len(t, cfg.Peers, 3)
		for p, peer := range cfg.Peers {
			h, _ := hostPort(t, peer.API)
			assert.Equal(t, podDNS(t, m, cs, pods[p]), h)
			assert.EqualValues(t, p+1, peer.ID)
		}
		assert.Equal(t, "/etc/vdl/tls/config"+strconv.Itoa(o+1)+".crt", cfg.CertFile)
		assertDataOnPVC(t, cs, cfg.DataDir)
		assertMountedFrom(t, cs, cfg.CertFile, "vdl-certs")
		assertMountedFrom(t, cs, cfg.TokenFile, "vdl-admin-token")
		assertHealthProbes(t, cs, cfg.APIListen, "HTTPS")
	}
}

// The servers: three, each a server of the config servers (their DNS
// names and API port), with node id ordinal + 1 and its own DNS name
// advertised.
func TestServers(t *testing.T) {
	m := render(t, "")
	cs := m.statefulSets["vdl-config"]
	require.NotNil(t, cs)
	var configServers []string
	for _, pod := range podNames(cs) {
		cfg := configServerConfig(t, m, cs, pod)
		configServers = append(configServers, cfg.APIListen)
	}
	sets := m.serverSets()
	require.Len(t, sets, 1)
	s := sets[0]
	require.EqualValues(t, 3, *s.Spec.Replicas)
	for o, pod := range podNames(s) {
		cfg := serverConfig(t, m, s, pod)
		assert.EqualValues(t, o+1, cfg.NodeID)
		assert.Equal(t, configServers, cfg.ConfigServers)
		dns := podDNS(t, m, s, pod)
		for _, addr := range []string{cfg.KafkaAdvertise, cfg.RaftListen, cfg.AdminListen} {
			h, _ := hostPort(t, addr)
			assert.Equal(t, dns, h)
		}
		assert.Equal(t, "dc1", cfg.DC)
		assert.Equal(t, fmt.Sprintf("/etc/vdl/tls/node%d.crt", o+1), cfg.TLS.CertFile)
		assertDataOnPVC(t, s, cfg.DataDir)
		assertMountedFrom(t, s, cfg.TLS.CertFile, "vdl-certs")
		assertMountedFrom(t, s, cfg.Admin.TokenFile, "vdl-admin-token")
		assertHealthProbes(t, s, cfg.AdminListen, "HTTPS")
		_, kafka := hostPort(t, cfg.KafkaAdvertise)
		assert.Equal(t, kafka, containerPort(t, s, "kafka"))
	}
}

// assertDataOnPVC: dir is the mount of a volumeClaimTemplate.
func assertDataOnPVC(t *testing.T, s *appsv1.StatefulSet, dir string) {
	t.Helper()
	require.NotEmpty(t, s.Spec.VolumeClaimTemplates, s.Name)
	for _, vm := range s.Spec.Template.Spec.Containers[0].VolumeMounts {
		if vm.MountPath == dir {
			for _, pvc := range s.Spec.VolumeClaimTemplates {
				if pvc.Name == vm.Name {
					assert.False(t, pvc.Spec.Resources.Requests.Storage().IsZero(), "%s: PVC without a size", s.Name)
					return
				}
			}
		}
	}
	t.Errorf("%s: data_dir %s is not on a volumeClaimTemplate", s.Name, dir)
}

// assertMountedFrom: file lies in a directory mounted from Secret secret.
func assertMountedFrom(t *testing.T, s *appsv1.StatefulSet, file, secret string) {
	t.Helper()
	require.NotEmpty(t, file, s.Name)
	spec := s.Spec.Template.Spec
	for _, vm := range spec.Containers[0].VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Dir(file) {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name {
					require.NotNil(t, v.Secret, "%s: %s is not a Secret volume", s.Name, v.Name)
					assert.Equal(t, secret, v.Secret.SecretName)
					return
				}
			}
		}
	}
	t.Errorf("%s: nothing mounted for %s", s.Name, file)
}

func containerPort(t *testing.T, s *appsv1.StatefulSet, name string) int {
	t.Helper()
	for _, p := range s.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("%s: no container port %q", s.Name, name)
	return 0
}

// assertHealthProbes: liveness and readiness GET /health on the port the
// TOML's HTTP listener (admin or API) listens on.
func assertHealthProbes(t *testing.T, s *appsv1.StatefulSet, listen string, scheme corev1.URIScheme) {
	t.Helper()
	_, port := hostPort(t, listen)
	c := s.Spec.Template.Spec.Containers[0]
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		require.NotNil(t, p, "%s: no %s probe", s.Name, name)
		require.NotNil(t, p.HTTPGet, "%s: %s probe is not an HTTP GET", s.Name, name)
		assert.Equal(t, "/health", p.HTTPGet.Path)
		assert.Equal(t, scheme, p.HTTPGet.Scheme, "%s %s", s.Name, name)
		assert.Equal(t, port, containerPort(t, s, p.HTTPGet.Port.String()), "%s: %s probe port", s.Name, name)
	}
}

// Every container runs as a non-root user on a read-only root file
// system, without privilege escalation or capabilities.
func TestPodsAreHardened(t *testing.T) {
	for name, values := range map[string]string{"default": "", "three zones": threeZones(t)} {
		m := render(t, values)
		require.NotEmpty(t, m.statefulSets, name)
		for _, s := range m.statefulSets {
			spec := s.Spec.Template.Spec
			require.NotNil(t, spec.SecurityContext, s.Name)
			require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
			assert.True(t, *spec.SecurityContext.RunAsNonRoot, s.Name)
			assert.NotZero(t, *spec.SecurityContext.RunAsUser, s.Name)
			require.NotNil(t, spec.SecurityContext.FSGroup, "%s: without fsGroup the PVC is not writable", s.Name)
			require.NotEmpty(t, spec.Containers)
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				sc := c.SecurityContext
				require.NotNil(t, sc, "%s/%s", s.Name, c.Name)
				assert.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s/%s runs as root", s.Name, c.Name)
				assert.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s/%s root fs writable", s.Name, c.Name)
				assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s/%s", s.Name, c.Name)
				require.NotNil(t, sc.Capabilities, "%s/%s", s.Name, c.Name)
				assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			}
		}
	}
}

// One budget per component, at most one pod down, selecting exactly that
// component's pods.
func TestDisruptionBudgets(t *testing.T) {
	m := render(t, threeZones(t))
	require.Len(t, m.pdbs, 2)
	for _, s := range m.statefulSets {
		var covering int
		for _, pdb := range m.pdbs {
			sel, err := metav1LabelSelector(pdb.Spec.Selector)
			require.NoError(t, err)
			if sel.Matches(labels.Set(s.Spec.Template.Labels)) {
				covering++
				require.NotNil(t, pdb.Spec.MaxUnavailable, pdb.Name)
				assert.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue(), pdb.Name)
			}
		}
		assert.Equal(t, 1, covering, "%s: pods under %d budgets", s.Name, covering)
	}
	assert.Empty(t, render(t, "podDisruptionBudget: {enabled: false}").pdbs)
}

// Pods of a component keep to different nodes, and spread over zones.
func TestSpreadOverNodesAndZones(t *testing.T) {
	m := render(t, "")
	for _, s := range m.statefulSets {
		spec := s.Spec.Template.Spec
		require.NotNil(t, spec.Affinity, s.Name)
		require.NotNil(t, spec.Affinity.PodAntiAffinity, s.Name)
		terms := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		require.Len(t, terms, 1, s.Name)
		assert.Equal(t, "kubernetes.io/hostname", terms[0].TopologyKey)
		sel, err := metav1LabelSelector(terms[0].LabelSelector)
		require.NoError(t, err)
		assert.True(t, sel.Matches(labels.Set(s.Spec.Template.Labels)), "%s: anti-affinity misses its own pods", s.Name)
		require.Len(t, spec.TopologySpreadConstraints, 1, s.Name)
		assert.Equal(t, "topology.kubernetes.io/zone", spec.TopologySpreadConstraints[0].TopologyKey)
	}
	soft := render(t, "server: {antiAffinity: soft}").statefulSets["vdl-server"].Spec.Template.Spec.Affinity.PodAntiAffinity
	assert.Empty(t, soft.RequiredDuringSchedulingIgnoredDuringExecution)
	assert.Len(t, soft.PreferredDuringSchedulingIgnoredDuringExecution, 1)
}

// Zones: a StatefulSet per zone pinned to it, the servers' DC its zone,
// node ids apart per zone, every config valid; for the chart's values file
// for three zones and for one zone of three servers.
func TestZones(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		zones        []string
		ids          map[uint64]string
	}{
		{"three", threeZones(t), []string{"zone-a", "zone-b", "zone-c"},
			map[uint64]string{1: "vdl-server-zone-a-0", 101: "vdl-server-zone-b-0", 201: "vdl-server-zone-c-0"}},
		{"one", "server: {zones: [zone-a], replicas: 3}", []string{"zone-a"},
			map[uint64]string{1: "vdl-server-zone-a-0", 2: "vdl-server-zone-a-1", 3: "vdl-server-zone-a-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.values)
			sets := m.serverSets()
			require.Len(t, sets, len(tc.zones))
			ids := map[uint64]string{}
			for i, zone := range tc.zones {
				s := sets[i]
				assert.Equal(t, "vdl-server-"+zone, s.Name)
				na := s.Spec.Template.Spec.Affinity.NodeAffinity
				require.NotNil(t, na, s.Name)
				terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				require.Len(t, terms, 1)
				require.Len(t, terms[0].MatchExpressions, 1)
				e := terms[0].MatchExpressions[0]
				assert.Equal(t, "topology.kubernetes.io/zone", e.Key)
				assert.Equal(t, corev1.NodeSelectorOpIn, e.Operator)
				assert.Equal(t, []string{zone}, e.Values)
				for _, pod := range podNames(s) {
					cfg := serverConfig(t, m, s, pod)
					assert.Equal(t, zone, cfg.DC)
					assert.Empty(t, ids[cfg.NodeID], "node id %d twice", cfg.NodeID)
					ids[cfg.NodeID] = pod
					h, _ := hostPort(t, cfg.KafkaAdvertise)
					assert.Equal(t, podDNS(t, m, s, pod), h)
				}
			}
			assert.Equal(t, tc.ids, ids)
		})
	}
}

// Replica counts, resources and storage from the values take effect, and
// the larger cluster's configs still validate.
func TestValueOverrides(t *testing.T) {
	m := render(t, `
configServer:
  replicas: 5
  storage: {size: 5Gi}
server:
  replicas: 5
  kafkaTLS: true
  resources:
    requests: {cpu: "4", memory: 16Gi}
    limits: {memory: 16Gi}
  storage: {size: 500Gi, storageClass: fast-ssd}
  updateStrategy: {type: OnDelete}
  extraConfig: |
    [storage]
    segment_bytes = 134217728
`)
	cs := m.statefulSets["vdl-config"]
	require.EqualValues(t, 5, *cs.Spec.Replicas)
	assert.True(t, cs.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().Equal(resource.MustParse("5Gi")))
	for _, pod := range podNames(cs) {
		assert.Len(t, configServerConfig(t, m, cs, pod).Peers, 5)
	}
	s := m.statefulSets["vdl-server"]
	require.EqualValues(t, 5, *s.Spec.Replicas)
	res := s.Spec.Template.Spec.Containers[0].Resources
	assert.True(t, res.Requests.Cpu().Equal(resource.MustParse("4")))
	assert.True(t, res.Limits.Memory().Equal(resource.MustParse("16Gi")))
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, s.Spec.UpdateStrategy.Type)
	pvc := s.Spec.VolumeClaimTemplates[0].Spec
	assert.True(t, pvc.Resources.Requests.Storage().Equal(resource.MustParse("500Gi")))
	require.NotNil(t, pvc.StorageClassName)
	assert.Equal(t, "fast-ssd", *pvc.StorageClassName)
	for o, pod := range podNames(s) {
		cfg := serverConfig(t, m, s, pod)
		assert.EqualValues(t, o+1, cfg.NodeID)
		assert.Len(t, cfg.ConfigServers, 5)
		assert.EqualValues(t, 128<<20, cfg.Storage.SegmentBytes)
		_, port := hostPort(t, cfg.KafkaTLSListen)
		assert.Equal(t, port, containerPort(t, s, "kafka-tls"))
	}
}

// Without TLS and token the configs say plain text (and still validate),
// the probes and scrapes use HTTP, and no Secret is mounted.
func TestPlainText(t *testing.T) {
	m := render(t, "tls: {enabled: false}\nadminToken: {secretName: \"\"}\n")
	cs := m.statefulSets["vdl-config"]
	for _, pod := range podNames(cs) {
		cfg := configServerConfig(t, m, cs, pod)
		assert.True(t, cfg.Insecure)
		assertHealthProbes(t, cs, cfg.APIListen, "HTTP")
	}
	s := m.statefulSets["vdl-server"]
	for _, pod := range podNames(s) {
		cfg := serverConfig(t, m, s, pod)
		assert.True(t, cfg.TLS.InsecurePeers)
		assert.Empty(t, cfg.Admin.TokenFile)
		assertHealthProbes(t, s, cfg.AdminListen, "HTTP")
	}
	for _, set := range m.statefulSets {
		for _, v := range set.Spec.Template.Spec.Volumes {
			assert.Nil(t, v.Secret, "%s mounts %s", set.Name, v.Name)
		}
		assert.Equal(t, "http", set.Spec.Template.Annotations["prometheus.io/scheme"])
	}
}

// Pods carry Prometheus' scrape annotations on their metrics port; a
// ServiceMonitor per component exists only when asked for.
func TestMetricsScraping(t *testing.T) {
	m := render(t, "")
	for _, s := range m.statefulSets {
		a := s.Spec.Template.Annotations
		assert.Equal(t, "true", a["prometheus.io/scrape"], s.Name)
		assert.Equal(t, "/metrics", a["prometheus.io/path"], s.Name)
		assert.Equal(t, "https", a["prometheus.io/scheme"], s.Name)
		metricsPort := "admin"
		if s.Name == "vdl-config" {
			metricsPort = "api"
		}
		assert.Equal(t, strconv.Itoa(containerPort(t, s, metricsPort)), a["prometheus.io/port"], s.Name)
	}
	assert.Empty(t, m.kinds["ServiceMonitor"])
	on := render(t, "metrics: {serviceMonitor: {enabled: true}}")
	assert.ElementsMatch(t, []string{"vdl-configserver", "vdl-server"}, on.kinds["ServiceMonitor"])
	// Each scrapes /metrics on a named port of a Service it selects, and
	// that port is the one carrying the pods' metrics annotation.
	for _, sm := range on.monitors {
		sel, err := metav1LabelSelector(&sm.Spec.Selector)
		require.NoError(t, err)
		require.Len(t, sm.Spec.Endpoints, 1, sm.Metadata.Name)
		ep := sm.Spec.Endpoints[0]
		assert.Equal(t, "/metrics", ep.Path)
		assert.Equal(t, "https", ep.Scheme)
		var scraped int
		for _, svc := range on.services {
			if !sel.Matches(labels.Set(svc.Labels)) {
				continue
			}
			for _, p := range svc.Spec.Ports {
				if p.Name != ep.Port {
					continue
				}
				scraped++
				for _, s := range on.statefulSets {
					if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
						assert.Equal(t, strconv.Itoa(int(p.Port)), s.Spec.Template.Annotations["prometheus.io/port"], "%s -> %s", sm.Metadata.Name, s.Name)
					}
				}
			}
		}
		assert.Equal(t, 1, scraped, "%s: port %q on %d selected services", sm.Metadata.Name, ep.Port, scraped)
	}
}

// Values the cluster could not run with are refused at render time, each
// with a message naming the value.
func TestRefusedValues(t *testing.T) {
	for values, want := range map[string]string{
		"configServer: {replicas: 2}":                     "configServer.replicas: an odd number",
		"tls: {enabled: false}\nserver: {kafkaTLS: true}": "server.kafkaTLS needs tls.enabled",
		"server: {zones: [Zone_A]}":                       `server.zones: "Zone_A" is not a DNS label`,
		"server: {replicas: 100}":                         "server.replicas: at most 99",
	} {
		_, err := tryRender(t, values)
		if assert.Error(t, err, values) {
			assert.Contains(t, err.Error(), want)
		}
	}
}

// Adding a server leaves the running servers' pod template alone (a new
// pod TOML must not restart every server), while a setting in every TOML
// rolls them.
func TestScaleUpRestartsNoServer(t *testing.T) {
	before := render(t, "").statefulSets["vdl-server"]
	more := render(t, "server: {replicas: 4}").statefulSets["vdl-server"]
	assert.Equal(t, before.Spec.Template, more.Spec.Template)
	debug := render(t, "log: {level: debug}").statefulSets["vdl-server"]
	assert.NotEqual(t, before.Spec.Template.Annotations["checksum/config"], debug.Spec.Template.Annotations["checksum/config"])
	extra := render(t, "server: {extraConfig: \"[raft]\\ntick_ms = 50\\n\"}").statefulSets["vdl-server"]
	assert.NotEqual(t, before.Spec.Template.Annotations["checksum/config"], extra.Spec.Template.Annotations["checksum/config"])
}

// Another release name, namespace and cluster domain: every name follows,
// and the configs still name each other correctly.
func TestOtherReleaseAndNamespace(t *testing.T) {
	m, err := renderAs(t, "prod", "kafka", "clusterDomain: corp.internal")
	require.NoError(t, err)
	cs, ok := m.statefulSets["prod-vdl-config"]
	require.True(t, ok, "%v", m.kinds["StatefulSet"])
	var apis []string
	for _, pod := range podNames(cs) {
		apis = append(apis, configServerConfig(t, m, cs, pod).APIListen)
	}
	assert.Equal(t, "prod-vdl-config-0.prod-vdl-config.kafka.svc.corp.internal:7100", apis[0])
	s, ok := m.statefulSets["prod-vdl-server"]
	require.True(t, ok, "%v", m.kinds["StatefulSet"])
	for _, pod := range podNames(s) {
		cfg := serverConfig(t, m, s, pod)
		assert.Equal(t, apis, cfg.ConfigServers)
		assert.Equal(t, pod+".prod-vdl-server.kafka.svc.corp.internal:9092", cfg.KafkaAdvertise)
	}
	assert.Contains(t, m.notes, "'*.prod-vdl-server.kafka.svc.corp.internal,*.prod-vdl-config.kafka.svc.corp.internal,prod-vdl-kafka.kafka.svc.corp.internal'")
}

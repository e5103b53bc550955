package helmtest

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/server"
)

const (
	chartDir  = "../vdl"
	release   = "vdl"
	namespace = "streaming"
)

// manifests is one rendering of the chart, by kind and name.
type manifests struct {
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	pdbs         map[string]*policyv1.PodDisruptionBudget
	kinds        map[string][]string // every object's name by kind, ServiceMonitors included
	notes        string              // NOTES.txt: what helm install prints
	monitors     []serviceMonitor
}

// serviceMonitor is the part of prometheus-operator's ServiceMonitor the
// tests check (its Go types are not worth the dependency).
type serviceMonitor struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port   string `json:"port"`
			Path   string `json:"path"`
			Scheme string `json:"scheme"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// render renders the chart as `helm template --namespace streaming vdl
// deploy/helm/vdl -f <valuesYAML>` does.
func render(t *testing.T, valuesYAML string) manifests {
	t.Helper()
	m, err := tryRender(t, valuesYAML)
	require.NoError(t, err)
	return m
}

func tryRender(t *testing.T, valuesYAML string) (manifests, error) {
	t.Helper()
	return renderAs(t, release, namespace, valuesYAML)
}

// renderAs renders for another release name and namespace.
func renderAs(t *testing.T, release, namespace, valuesYAML string) (manifests, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	require.NoError(t, err)
	overrides, err := chartutil.ReadValues([]byte(valuesYAML))
	require.NoError(t, err)
	vals, err := chartutil.ToRenderValues(chrt, overrides,
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	require.NoError(t, err)
	files, err := engine.Render(chrt, vals)
	if err != nil {
		return manifests{}, err
	}
	m := manifests{statefulSets: map[string]*appsv1.StatefulSet{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}, kinds: map[string][]string{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			m.notes = files[name]
			continue
		}
		if strings.HasSuffix(name, ".tpl") {
			continue
		}
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
				continue
			}
			m.add(t, name, []byte(doc))
		}
	}
	return m, nil
}

// add decodes one object strictly: a field the API type does not have
// (a misspelt or misplaced key in a template) fails the test.
func (m manifests) add(t *testing.T, file string, doc []byte) {
	t.Helper()
	var meta struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	require.NoError(t, yaml.Unmarshal(doc, &meta), "%s:\n%s", file, doc)
	require.NotEmpty(t, meta.Kind, "%s: an object without kind:\n%s", file, doc)
	m.kinds[meta.Kind] = append(m.kinds[meta.Kind], meta.Metadata.Name)
	strict := func(into any) {
		require.NoError(t, yaml.UnmarshalStrict(doc, into), "%s:\n%s", file, doc)
	}
	switch meta.Kind {
	case "StatefulSet":
		var o appsv1.StatefulSet
		strict(&o)
		m.statefulSets[o.Name] = &o
	case "Service":
		var o corev1.Service
		strict(&o)
		m.services[o.Name] = &o
	case "ConfigMap":
		var o corev1.ConfigMap
		strict(&o)
		m.configMaps[o.Name] = &o
	case "ServiceMonitor":
		var o serviceMonitor
		require.NoError(t, yaml.Unmarshal(doc, &o), "%s:\n%s", file, doc)
		m.monitors = append(m.monitors, o)
	case "PodDisruptionBudget":
		var o policyv1.PodDisruptionBudget
		strict(&o)
		m.pdbs[o.Name] = &o
	}
}

// serverSets are the servers' StatefulSets (one, or one per zone).
func (m manifests) serverSets() []*appsv1.StatefulSet {
	var out []*appsv1.StatefulSet
	for _, s := range m.statefulSets {
		if s.Spec.Template.Labels["app.kubernetes.io/component"] == "server" {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podNames are the pods a StatefulSet makes: <name>-<ordinal>.
func podNames(s *appsv1.StatefulSet) []string {
	var out []string
	for o := range int(*s.Spec.Replicas) {
		out = append(out, s.Name+"-"+strconv.Itoa(o))
	}
	return out
}

// podConfig is the TOML the pod reads: the container's --config path,
// with $(POD_NAME) expanded as the kubelet does, looked up in the
// ConfigMap mounted at that path's directory.
func podConfig(t *testing.T, m manifests, s *appsv1.StatefulSet, pod string) string {
	t.Helper()
	spec := s.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	i := indexOf(c.Args, "--config")
	require.GreaterOrEqual(t, i, 0, "%s: no --config in %v", s.Name, c.Args)
	require.Less(t, i+1, len(c.Args))
	// POD_NAME must come from the downward API for the expansion to name the pod.
	var fromPod bool
	for _, e := range c.Env {
		if e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fromPod = e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}
	}
	require.True(t, fromPod, "%s: POD_NAME is not the pod's name", s.Name)
	path := strings.ReplaceAll(c.Args[i+1], "$(POD_NAME)", pod)
	dir, file := filepath.Split(path)
	var cmName string
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil {
					cmName = v.ConfigMap.Name
				}
			}
		}
	}
	require.NotEmpty(t, cmName, "%s: no ConfigMap mounted at %s", s.Name, dir)
	cm, ok := m.configMaps[cmName]
	require.True(t, ok, "ConfigMap %s is not rendered", cmName)
	toml, ok := cm.Data[file]
	require.True(t, ok, "ConfigMap %s has no %s for pod %s (keys %v)", cmName, file, pod, keys(cm.Data))
	return toml
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeTemp puts a TOML where the VDL loaders can read it.
func writeTemp(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

// serverConfig loads and validates a pod's server TOML with the server's
// own code: what `vdl server --config` would do before starting.
func serverConfig(t *testing.T, m manifests, s *appsv1.StatefulSet, pod string) server.Config {
	t.Helper()
	cfg, err := server.LoadConfig(writeTemp(t, pod+".toml", podConfig(t, m, s, pod)))
	require.NoError(t, err, pod)
	require.NoError(t, cfg.Validate(), pod)
	return cfg
}

// configServerConfig does the same for a config server pod.
func configServerConfig(t *testing.T, m manifests, s *appsv1.StatefulSet, pod string) configserver.Config {
	t.Helper()
	cfg, err := configserver.LoadConfig(writeTemp(t, pod+".toml", podConfig(t, m, s, pod)))
	require.NoError(t, err, pod)
	require.NoError(t, cfg.Validate(), pod)
	return cfg
}

// metav1LabelSelector turns a LabelSelector into a matcher.
func metav1LabelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}

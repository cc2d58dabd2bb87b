package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// chartDir is the Helm chart under test.
const chartDir = "helm/sluice"

// helmInstall is the command that installs the Helm the tests use
// (scripts/services.sh runs it).
const helmInstall = "scripts/services.sh (or: go install helm.sh/helm/v3/cmd/helm@v3.22.0)"

// helmPath returns the helm executable: from PATH, else from the folder
// where `go install` puts it. Without one it skips t, or fails it under CI
// (the environment variable CI is set), where scripts/services.sh has
// installed it.
func helmPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	for _, dir := range []string{goEnv("GOBIN"), filepath.Join(goEnv("GOPATH"), "bin")} {
		p := filepath.Join(dir, "helm")
		if dir != "" && dir != "bin" && isExecutable(p) {
			return p
		}
	}
	msg := "helm is not installed (not in PATH nor in $(go env GOPATH)/bin); install it with " + helmInstall
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// release is the name and namespace the chart is rendered with.
const (
	releaseName      = "rl"
	releaseNamespace = "limits"
)

// renderChart runs `helm template` on the chart with values and returns
// its manifests, or helm's error output.
func renderChart(t *testing.T, helm string, values map[string]any) ([]manifest, error) {
	t.Helper()
	raw, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runHelm(t.TempDir(), raw, helm, "template", releaseName, chartDir, "--namespace", releaseNamespace, "--values", "-")
	if err != nil {
		return nil, err
	}
	return parseManifests(t, out), nil
}

// lintChart runs `helm lint --strict` on the chart with values.
func lintChart(t *testing.T, helm string, values map[string]any) error {
	t.Helper()
	raw, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runHelm(t.TempDir(), raw, helm, "lint", "--strict", chartDir, "--namespace", releaseNamespace, "--values", "-")
	return err
}

// runHelm runs helm with args and values on its standard input, its state
// in dir, and returns its output or an error holding all it printed.
func runHelm(dir string, values []byte, helm string, args ...string) ([]byte, error) {
	cmd := exec.Command(helm, args...)
	cmd.Stdin = bytes.NewReader(values)
	// helm keeps no state of the test's in the user's folders.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(strings.TrimSpace(stderr.String() + "\n" + stdout.String()))
	}
	return stdout.Bytes(), nil
}

// manifest is one Kubernetes object of the rendered chart.
type manifest struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	raw []byte
}

// decode unmarshals the whole object into v.
func (m manifest) decode(t *testing.T, v any) {
	t.Helper()
	if err := yaml.Unmarshal(m.raw, v); err != nil {
		t.Fatalf("%s %s: %v", m.Kind, m.Metadata.Name, err)
	}
}

// parseManifests splits helm's output into its YAML documents and parses
// each; it fails t on a document that is not YAML or lacks apiVersion,
// kind or name.
func parseManifests(t *testing.T, out []byte) []manifest {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(out))
	var docs []manifest
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			if err.Error() == "EOF" {
				return docs
			}
			t.Fatalf("helm template output is not YAML: %v", err)
		}
		raw, err := yaml.Marshal(&node)
		if err != nil {
			t.Fatal(err)
		}
		var m manifest
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind == "" && m.APIVersion == "" { // an empty document
			continue
		}
		if m.Kind == "" || m.APIVersion == "" || m.Metadata.Name == "" {
			t.Fatalf("a manifest without apiVersion, kind or name:\n%s", raw)
		}
		m.raw = raw
		docs = append(docs, m)
	}
}

// find returns the manifest of kind and name ("" for any name), or nil.
func find(docs []manifest, kind, name string) *manifest {
	for i := range docs {
		if docs[i].Kind == kind && (name == "" || docs[i].Metadata.Name == name) {
			return &docs[i]
		}
	}
	return nil
}

// The parts of Kubernetes objects that the test reads.
type (
	workload struct {
		Spec struct {
			ServiceName string `yaml:"serviceName"`
			Selector    struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		EnableServiceLinks           *bool           `yaml:"enableServiceLinks"`
		AutomountServiceAccountToken *bool           `yaml:"automountServiceAccountToken"`
		SecurityContext              securityContext `yaml:"securityContext"`
		Containers                   []container     `yaml:"containers"`
		Volumes                      []volume        `yaml:"volumes"`
	}
	securityContext struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	}
	container struct {
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
				SecretKeyRef *struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports          []containerPort `yaml:"ports"`
		StartupProbe   *probe          `yaml:"startupProbe"`
		LivenessProbe  *probe          `yaml:"livenessProbe"`
		ReadinessProbe *probe          `yaml:"readinessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext securityContext `yaml:"securityContext"`
		VolumeMounts    []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	containerPort struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	volume struct {
		Name     string    `yaml:"name"`
		EmptyDir *struct{} `yaml:"emptyDir"`
		Secret   *struct {
			SecretName string      `yaml:"secretName"`
			Items      []keyToPath `yaml:"items"`
		} `yaml:"secret"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	}
	keyToPath struct {
		Key  string `yaml:"key"`
		Path string `yaml:"path"`
	}
	service struct {
		Spec struct {
			ClusterIP                string            `yaml:"clusterIP"`
			PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
			Selector                 map[string]string `yaml:"selector"`
			Ports                    []struct {
				Name       string `yaml:"name"`
				Port       int    `yaml:"port"`
				TargetPort any    `yaml:"targetPort"`
				Protocol   string `yaml:"protocol"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	secret struct {
		StringData map[string]string `yaml:"stringData"`
	}
	configMap struct {
		Data map[string]string `yaml:"data"`
	}
)

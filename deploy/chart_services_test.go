package deploy

import (
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkServices checks the API Service (HTTP on --http-addr's port and,
// with --rls-addr, Envoy RLS on its port), the metrics Service (the admin
// port) and, when rendered, the ServiceMonitor that scrapes it.
func checkServices(t *testing.T, docs []manifest, w workload, flags map[string]string) {
	t.Helper()
	pod := w.Spec.Template
	ctr := pod.Spec.Containers[0]
	var api, metrics *manifest
	for i, d := range docs {
		switch {
		case d.Kind != "Service":
		case d.Metadata.Labels["app.kubernetes.io/component"] == "metrics":
			metrics = &docs[i]
		case !strings.HasSuffix(d.Metadata.Name, "-headless"):
			api = &docs[i]
		}
	}
	if api == nil || metrics == nil {
		t.Fatal("no API Service or no metrics Service")
	}
	want := map[string]int{"http": portOf(t, flags["http-addr"])}
	if addr, ok := flags["rls-addr"]; ok {
		want["grpc-rls"] = portOf(t, addr)
	}
	checkServicePorts(t, api, pod.Metadata.Labels, ctr, want)
	checkServicePorts(t, metrics, pod.Metadata.Labels, ctr, map[string]int{"admin": portOf(t, flags["admin-addr"])})
	if sm := find(docs, "ServiceMonitor", ""); sm != nil {
		var s struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `yaml:"matchLabels"`
				} `yaml:"selector"`
				Endpoints []struct {
					Port string `yaml:"port"`
					Path string `yaml:"path"`
				} `yaml:"endpoints"`
			} `yaml:"spec"`
		}
		sm.decode(t, &s)
		if !subset(s.Spec.Selector.MatchLabels, metrics.Metadata.Labels) || len(s.Spec.Endpoints) != 1 ||
			s.Spec.Endpoints[0].Port != "admin" || s.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor %+v does not scrape /metrics on the metrics Service's admin port", s.Spec)
		}
		if subset(s.Spec.Selector.MatchLabels, api.Metadata.Labels) {
			t.Error("the ServiceMonitor also selects the API Service")
		}
	}
}

// checkServicePorts checks that the Service selects the pod and has
// exactly the ports of want (name: container port), each reaching it.
func checkServicePorts(t *testing.T, m *manifest, podLabels map[string]string, ctr container, want map[string]int) {
	t.Helper()
	var s service
	m.decode(t, &s)
	if len(s.Spec.Selector) == 0 || !subset(s.Spec.Selector, podLabels) {
		t.Errorf("Service %s: selector %v does not select the pod", m.Metadata.Name, s.Spec.Selector)
	}
	if len(s.Spec.Ports) != len(want) {
		t.Errorf("Service %s: %d ports; want %v", m.Metadata.Name, len(s.Spec.Ports), want)
	}
	for _, p := range s.Spec.Ports {
		if got := resolvePort(ctr, p.TargetPort); got == 0 || got != want[p.Name] {
			t.Errorf("Service %s: port %s reaches container port %d; want %d", m.Metadata.Name, p.Name, got, want[p.Name])
		}
	}
}

// checkHeadless checks the cluster's discovery: a headless Service that
// publishes not-ready pods, named by the StatefulSet, with the gossip port
// (TCP and UDP) of --cluster-addr; --cluster-join is its DNS name in the
// release's namespace; --cluster-advertise is the pod's IP.
func checkHeadless(t *testing.T, docs []manifest, w workload, flags map[string]string) {
	t.Helper()
	name := w.Spec.ServiceName
	m := find(docs, "Service", name)
	if name == "" || m == nil {
		t.Fatalf("no headless Service %q (the StatefulSet's serviceName)", name)
	}
	var s service
	m.decode(t, &s)
	if s.Spec.ClusterIP != "None" || !s.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want None, true", name, s.Spec.ClusterIP, s.Spec.PublishNotReadyAddresses)
	}
	if !subset(s.Spec.Selector, w.Spec.Template.Metadata.Labels) || len(s.Spec.Selector) == 0 {
		t.Errorf("Service %s does not select the pods", name)
	}
	gossip := portOf(t, flags["cluster-addr"])
	ctr := w.Spec.Template.Spec.Containers[0]
	protocols := map[string]bool{}
	for _, p := range s.Spec.Ports {
		if p.Port == gossip && resolvePort(ctr, p.TargetPort) == gossip {
			protocols[p.Protocol] = true
		}
	}
	if !protocols["TCP"] || !protocols["UDP"] {
		t.Errorf("Service %s: gossip port %d over %v; want TCP and UDP", name, gossip, protocols)
	}
	host, port, err := net.SplitHostPort(flags["cluster-join"])
	if err != nil || !strings.HasPrefix(host, name+"."+releaseNamespace+".svc.") || port != strconv.Itoa(gossip) {
		t.Errorf("--cluster-join=%s; want %s.%s.svc.<domain>:%d", flags["cluster-join"], name, releaseNamespace, gossip)
	}
	if flags["cluster-advertise"] != "$(POD_IP):"+strconv.Itoa(gossip) {
		t.Errorf("--cluster-advertise=%s; want $(POD_IP):%d", flags["cluster-advertise"], gossip)
	}
	podIP := false
	for _, e := range ctr.Env {
		podIP = podIP || (e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP")
	}
	if !podIP {
		t.Error("no POD_IP from status.podIP")
	}
}

// checkPDB checks that a PodDisruptionBudget, when rendered, selects the
// pods.
func checkPDB(t *testing.T, docs []manifest, w workload) {
	t.Helper()
	m := find(docs, "PodDisruptionBudget", "")
	if m == nil {
		return
	}
	var pdb struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
	m.decode(t, &pdb)
	if len(pdb.Spec.Selector.MatchLabels) == 0 || !subset(pdb.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods", pdb.Spec.Selector.MatchLabels)
	}
}

// checkRLS checks that --rls-config names a folder mounted from a
// ConfigMap whose files are envoyproxy/ratelimit YAML with a domain.
func checkRLS(t *testing.T, docs []manifest, pod podSpec, flags map[string]string) {
	t.Helper()
	dir, ok := flags["rls-config"]
	if !ok {
		return
	}
	v, _ := mountOf(pod, dir)
	if v == nil || v.ConfigMap == nil {
		t.Fatalf("--rls-config=%s: no ConfigMap mounted there", dir)
	}
	m := find(docs, "ConfigMap", v.ConfigMap.Name)
	if m == nil {
		t.Fatalf("ConfigMap %s is not rendered", v.ConfigMap.Name)
	}
	var cm configMap
	m.decode(t, &cm)
	for file, text := range cm.Data {
		var rules struct {
			Domain string `yaml:"domain"`
		}
		if err := yaml.Unmarshal([]byte(text), &rules); err != nil || rules.Domain == "" || !strings.HasSuffix(file, ".yaml") {
			t.Errorf("ConfigMap %s: %s is not a .yaml file with a domain (%v)", m.Metadata.Name, file, err)
		}
	}
}

// bootPod starts the container as rendered, with the test standing in for
// Kubernetes: the Secret and ConfigMap volumes become folders of their
// files, the emptyDir an empty folder, $(POD_IP) 127.0.0.1, variables from
// Secrets their values, and each listening address a free loopback port
// (the cluster joins itself through localhost). The readiness and liveness
// probes, as rendered, must then answer 200.
func bootPod(t *testing.T, c chartCase, docs []manifest, w workload) {
	pod := w.Spec.Template.Spec
	ctr := pod.Containers[0]
	env := map[string]string{"POD_IP": "127.0.0.1"}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = c.existing[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key]
		}
	}
	mounts := mountVolumes(t, c, docs, pod)
	ports := map[string]int{}
	gossip := freePort(t)
	var args []string
	for _, a := range ctr.Args {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--http-addr", "--admin-addr", "--rls-addr":
			ports[name] = freePort(t)
			value = "127.0.0.1:" + strconv.Itoa(ports[name])
		case "--cluster-addr":
			value = "127.0.0.1:" + strconv.Itoa(gossip)
		case "--cluster-advertise": // $(POD_IP):PORT
			host, _, _ := net.SplitHostPort(value)
			value = net.JoinHostPort(host, strconv.Itoa(gossip))
		case "--cluster-join":
			value = "localhost:" + strconv.Itoa(gossip)
		}
		for mountPath, dir := range mounts {
			if value == mountPath || strings.HasPrefix(value, mountPath+"/") {
				value = dir + strings.TrimPrefix(value, mountPath)
			}
		}
		if name == "serve" {
			args = append(args, a)
			continue
		}
		for k, v := range env { // Kubernetes expands $(VAR) in args
			value = strings.ReplaceAll(value, "$("+k+")", v)
		}
		args = append(args, name+"="+value)
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	p := startSluice(t, ports["--admin-addr"], environ, args...)
	p.waitStatus(t, ctr.ReadinessProbe.HTTPGet.Path, http.StatusOK, 30*time.Second)
	p.waitStatus(t, ctr.LivenessProbe.HTTPGet.Path, http.StatusOK, 5*time.Second)
}

// mountVolumes writes the container's volumes into folders of the test's
// and returns them by mount path.
func mountVolumes(t *testing.T, c chartCase, docs []manifest, pod podSpec) map[string]string {
	t.Helper()
	root := t.TempDir()
	mounts := map[string]string{}
	for _, vm := range pod.Containers[0].VolumeMounts {
		dir := filepath.Join(root, vm.Name)
		v, _ := mountOf(pod, vm.MountPath)
		if v == nil {
			t.Fatalf("volume mount %s: no volume", vm.Name)
		}
		files := map[string]string{}
		switch {
		case v.Secret != nil:
			for _, it := range v.Secret.Items {
				files[it.Path], _ = secretFile(t, c, docs, v, it.Path)
			}
		case v.ConfigMap != nil:
			var cm configMap
			find(docs, "ConfigMap", v.ConfigMap.Name).decode(t, &cm)
			files = cm.Data
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			writeFile(t, filepath.Join(dir, name), content)
		}
		mounts[path.Clean(vm.MountPath)] = dir
	}
	return mounts
}

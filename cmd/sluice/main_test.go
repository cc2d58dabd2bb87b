package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		want       bool
	}{
		{"ipv4 loopback", "127.0.0.1:7070", true},
		{"other 127/8", "127.1.2.3:0", true},
		{"ipv6 loopback", "[::1]:7070", true},
		{"localhost", "localhost:7070", true},
		{"all interfaces", ":7070", false},
		{"unspecified", "0.0.0.0:7070", false},
		{"public", "10.0.0.1:7070", false},
		{"hostname", "example.com:7070", false},
		{"no port", "127.0.0.1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isLoopback(tc.addr); got != tc.want {
				t.Fatalf("isLoopback(%q) = %v", tc.addr, got)
			}
		})
	}
}

func TestServeValidate(t *testing.T) {
	base := func() serveCmd {
		return serveCmd{HTTPAddr: "127.0.0.1:0", Region: "local", DataDir: "d", ShutdownTimeout: 1, OverrideRefresh: 1, MaxConns: 10,
			GlobalFlags:    GlobalFlags{GlobalInterval: 5 * time.Second, GlobalCounters: true, DenialPropagation: true, DenialMinWindow: time.Minute, DenialMinUsage: 0.5},
			AnalyticsFlags: AnalyticsFlags{Analytics: true, AnalyticsMaxNamespaces: 256}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*serveCmd)
		want   string // "" = valid
	}{
		{"defaults", func(*serveCmd) {}, ""},
		{"bad addr", func(c *serveCmd) { c.HTTPAddr = "nope" }, "--http-addr"},
		{"empty region", func(c *serveCmd) { c.Region = "" }, "--region"},
		{"redis url ok", func(c *serveCmd) { c.RedisURL = "redis://127.0.0.1:6379/0" }, ""},
		{"redis url wrong scheme", func(c *serveCmd) { c.RedisURL = "http://x" }, "--redis-url"},
		{"origin redis without url", func(c *serveCmd) { c.Origin = "redis" }, "needs --redis-url"},
		{"root key ok", func(c *serveCmd) { c.RootKey = []string{"a:b:0123456789abcdef:ws"} }, ""},
		{"root key bad", func(c *serveCmd) { c.RootKey = []string{"nocolon"} }, "--root-key"},
		{"root key of 1 byte", func(c *serveCmd) { c.RootKey = []string{"k:ws"} }, "at least 16 bytes"},
		{"root key of 15 bytes", func(c *serveCmd) { c.RootKey = []string{"0123456789abcde:ws"} }, "at least 16 bytes"},
		{"max conns zero", func(c *serveCmd) { c.MaxConns = 0 }, "--max-conns"},
		{"zero shutdown", func(c *serveCmd) { c.ShutdownTimeout = 0 }, "--shutdown-timeout"},
		{"negative max namespaces", func(c *serveCmd) { c.MaxNamespaces = -1 }, "--max-namespaces"},
		{"negative max overrides", func(c *serveCmd) { c.MaxOverrides = -1 }, "--max-overrides"},
		{"otel endpoint ok", func(c *serveCmd) { c.OTelEndpoint = "http://127.0.0.1:4318" }, ""},
		{"otel endpoint not http", func(c *serveCmd) { c.OTelEndpoint = "grpc://127.0.0.1:4317" }, "--otel-endpoint"},
		{"otel endpoint without host", func(c *serveCmd) { c.OTelEndpoint = "http:///v1/traces" }, "--otel-endpoint"},
		{"sample ratio above 1", func(c *serveCmd) { c.OTelSampleRatio = 1.5 }, "--otel-sample-ratio"},
		{"sample ratio negative", func(c *serveCmd) { c.OTelSampleRatio = -0.1 }, "--otel-sample-ratio"},
		{"store redis without url", func(c *serveCmd) { c.Store = "redis" }, "--store redis needs --redis-url"},
		{"store mysql without dsn", func(c *serveCmd) { c.Store = "mysql" }, "--store mysql needs --mysql-dsn"},
		{"store sqlite without data dir", func(c *serveCmd) { c.Store, c.DataDir, c.MySQLDSN = "sqlite", "", "root@/x" }, "--data-dir"},
		{"mysql needs no data dir", func(c *serveCmd) { c.DataDir, c.MySQLDSN = "", "root@/x" }, ""},
		{"negative max counters", func(c *serveCmd) { c.MaxCounters = -1 }, "--max-counters"},
		{"zero global interval", func(c *serveCmd) { c.GlobalInterval = 0 }, "--global-interval"},
		{"negative denial window", func(c *serveCmd) { c.DenialMinWindow = -time.Second }, "--denial-min-window"},
		{"denial usage zero", func(c *serveCmd) { c.DenialMinUsage = 0 }, "--denial-min-usage"},
		{"denial usage above 1", func(c *serveCmd) { c.DenialMinUsage = 1.5 }, "--denial-min-usage"},
		{"both global mechanisms off", func(c *serveCmd) { c.GlobalCounters, c.DenialPropagation = false, false }, ""},
		{"analytics off", func(c *serveCmd) { c.Analytics = false }, ""},
		{"analytics cap zero (the default)", func(c *serveCmd) { c.AnalyticsMaxNamespaces = 0 }, ""},
		{"analytics cap negative", func(c *serveCmd) { c.AnalyticsMaxNamespaces = -1 }, "--analytics-max-namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestStoreKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  serveCmd
		want string
	}{
		{"nothing set", serveCmd{}, "sqlite"},
		{"redis url", serveCmd{RedisURL: "redis://r"}, "redis"},
		{"mysql dsn", serveCmd{MySQLDSN: "root@/x"}, "mysql"},
		{"mysql wins over redis", serveCmd{RedisURL: "redis://r", MySQLDSN: "root@/x"}, "mysql"},
		{"explicit sqlite beside redis", serveCmd{RedisURL: "redis://r", Store: "sqlite"}, "sqlite"},
		{"explicit redis beside mysql", serveCmd{RedisURL: "redis://r", MySQLDSN: "root@/x", Store: "redis"}, "redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cmd.storeKind(); got != tc.want {
				t.Fatalf("storeKind() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"no path gets the standard one", "http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"root path gets the standard one", "https://otel.example:4318/", "https://otel.example:4318/v1/traces"},
		{"a path is kept", "http://collector/custom/traces", "http://collector/custom/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tracesURL(tc.in); err != nil || got != tc.want {
				t.Fatalf("tracesURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestTracingEnabled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint string
		env      map[string]string
		want     bool
	}{
		{"off by default", "", nil, false},
		{"flag", "http://127.0.0.1:4318", nil, true},
		{"standard variable", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"standard traces variable", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"SDK disabled beats the flag", "http://127.0.0.1:4318", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
				t.Setenv(k, tc.env[k])
			}
			c := serveCmd{OTelEndpoint: tc.endpoint}
			if got := c.tracingEnabled(); got != tc.want {
				t.Fatalf("tracingEnabled() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRunVersionAndUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"version", []string{"version"}, 0, "sluice dev"},
		{"help", []string{"--help"}, 0, "serve"},
		{"unknown command", []string{"frobnicate"}, 2, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, strings.NewReader(""), &out, &errOut)
			if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.out) {
				t.Fatalf("code %d, output %q %q", code, out.String(), errOut.String())
			}
		})
	}
}

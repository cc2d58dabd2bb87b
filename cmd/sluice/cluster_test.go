package main

import (
	"strings"
	"testing"
)

func TestClusterFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags ClusterFlags
		http  string
		want  string // "" = valid
	}{
		{"loopback without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"127.0.0.1:7947", "localhost:7948"}}, "127.0.0.1:7070", ""},
		{"public gossip without secret", ClusterFlags{ClusterAddr: "0.0.0.0:7946"}, "127.0.0.1:7070", "--cluster-secret"},
		{"public http without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946"}, "10.0.0.1:7070", "--cluster-secret"},
		{"dns seed without secret", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"sluice.svc:7946"}}, "127.0.0.1:7070", "--cluster-secret"},
		{"public with secret", ClusterFlags{ClusterAddr: "0.0.0.0:7946", ClusterAdvertise: "10.0.0.1:7946", ClusterJoin: []string{"sluice.svc:7946"}, ClusterSecret: "s"}, "0.0.0.0:7070", ""},
		{"bad gossip address", ClusterFlags{ClusterAddr: "nope"}, "127.0.0.1:7070", "--cluster-addr"},
		{"bad advertise address", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterAdvertise: "x"}, "127.0.0.1:7070", "--cluster-advertise"},
		{"seed without port", ClusterFlags{ClusterAddr: "127.0.0.1:7946", ClusterJoin: []string{"127.0.0.1"}}, "127.0.0.1:7070", "--cluster-join"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.flags.validate(tc.http)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestClusterRPCURL(t *testing.T) {
	for _, tc := range []struct {
		flags      ClusterFlags
		http, want string
	}{
		{ClusterFlags{ClusterAddr: "127.0.0.1:7946"}, "127.0.0.1:7070", "http://127.0.0.1:7070"},
		{ClusterFlags{ClusterAddr: "0.0.0.0:7946", ClusterAdvertise: "10.0.0.5:7946"}, "[::]:7070", "http://10.0.0.5:7070"},
		{ClusterFlags{ClusterAddr: "0.0.0.0:7946"}, "0.0.0.0:7070", ""},
	} {
		c := serveCmd{ClusterFlags: tc.flags}
		got, err := c.rpcURL(tc.http)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("rpcURL(%q) with %+v = %q, %v; want %q", tc.http, tc.flags, got, err, tc.want)
		}
	}
}

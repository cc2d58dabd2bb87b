package main

import (
	"strings"
	"testing"
)

// TestRLSFlags checks that the flags of the RLS listener come together.
func TestRLSFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flags     RLSFlags
		rlsConfig string
		tls       TLSFlags
		want      string // "" for valid
	}{
		{"unset", RLSFlags{}, "", TLSFlags{}, ""},
		{"a listener", RLSFlags{RLSAddr: "127.0.0.1:0", RLSMaxConns: 10}, "r.yaml", TLSFlags{}, ""},
		{"mutual TLS", RLSFlags{RLSAddr: "0.0.0.0:8081", RLSClientCA: "ca.pem", RLSMaxConns: 10}, "r.yaml", TLSFlags{TLSCert: "c", TLSKey: "k"}, ""},
		{"a listener without rules", RLSFlags{RLSAddr: "127.0.0.1:0", RLSMaxConns: 10}, "", TLSFlags{}, "--rls-addr needs --rls-config"},
		{"a bad address", RLSFlags{RLSAddr: "8081", RLSMaxConns: 10}, "r.yaml", TLSFlags{}, `--rls-addr "8081"`},
		{"a client CA without a listener", RLSFlags{RLSClientCA: "ca.pem"}, "r.yaml", TLSFlags{TLSCert: "c", TLSKey: "k"}, "--rls-client-ca needs --rls-addr"},
		{"a client CA without TLS", RLSFlags{RLSAddr: "127.0.0.1:0", RLSClientCA: "ca.pem", RLSMaxConns: 10}, "r.yaml", TLSFlags{}, "--rls-client-ca needs --tls-cert"},
		{"a listener without connections", RLSFlags{RLSAddr: "127.0.0.1:0", RLSMaxConns: 0}, "r.yaml", TLSFlags{}, "--rls-max-conns must be at least 1"},
		{"no connections without a listener", RLSFlags{RLSMaxConns: 0}, "", TLSFlags{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.flags.validate(tc.rlsConfig, tc.tls)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("validate: %v, want %q", err, tc.want)
			}
		})
	}
}

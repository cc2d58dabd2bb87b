//go:build gzip

package main

// Linking grpc-go's gzip codec makes the client offer gzip on every call.
import _ "google.golang.org/grpc/encoding/gzip"

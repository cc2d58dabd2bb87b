package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/server"
)

// maxKeyBytes bounds what hash-key reads from standard input.
const maxKeyBytes = 64 << 10

// hashKeyCmd is `sluice hash-key`: it prints the SHA-256 of a root key read
// from standard input, for --root-key-sha256, so that the configuration
// never holds the key itself.
type hashKeyCmd struct{}

// Help is kong's long help of the command.
func (hashKeyCmd) Help() string {
	return `Reads one root key from standard input (one trailing newline is removed) and prints its SHA-256 in hex. Use it as --root-key-sha256 HEX:WORKSPACE:

  printf %s "$KEY" | sluice hash-key
  sluice hash-key < key.txt`
}

// Run reads the key from in and writes its hash to out.
func (hashKeyCmd) Run(in io.Reader, out io.Writer) error {
	b, err := io.ReadAll(io.LimitReader(in, maxKeyBytes+1))
	if err != nil {
		return fmt.Errorf("hash-key: reading standard input: %w", err)
	}
	if len(b) > maxKeyBytes {
		return fmt.Errorf("hash-key: standard input is longer than %d bytes", maxKeyBytes)
	}
	key := string(b)
	if k, ok := strings.CutSuffix(key, "\n"); ok {
		key = strings.TrimSuffix(k, "\r")
	}
	if key == "" {
		return errors.New("hash-key: no key on standard input")
	}
	if len(key) < server.MinRootKeyBytes {
		return fmt.Errorf("hash-key: the key is %d bytes long; a root key must be at least %d bytes (e.g. openssl rand -hex 32)", len(key), server.MinRootKeyBytes)
	}
	if err := (server.RootKey{Key: key, Workspace: "w"}).Validate(); err != nil {
		return fmt.Errorf("hash-key: %w", err)
	}
	_, err = fmt.Fprintln(out, server.HashRootKey(key))
	return err
}

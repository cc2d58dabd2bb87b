package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"time"
)

// RetryPolicy bounds and spaces the retries of a call; the package
// documentation says which calls are retried.
type RetryPolicy struct {
	// MaxAttempts is the most attempts of one call, the first included:
	// 1 turns retries off. At least 1.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt; it doubles for
	// each further one. More than 0.
	BaseDelay time.Duration
	// MaxDelay caps the backoff. At least BaseDelay.
	MaxDelay time.Duration
}

// DefaultRetryPolicy is the policy of a client without [WithRetry]: three
// attempts, 50 ms then 100 ms apart (each between half and all of that).
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("%w: retry: MaxAttempts %d is under 1", ErrInvalidConfig, p.MaxAttempts)
	case p.BaseDelay <= 0:
		return fmt.Errorf("%w: retry: BaseDelay %v is not positive", ErrInvalidConfig, p.BaseDelay)
	case p.MaxDelay < p.BaseDelay:
		return fmt.Errorf("%w: retry: MaxDelay %v is under BaseDelay %v", ErrInvalidConfig, p.MaxDelay, p.BaseDelay)
	}
	return nil
}

// backoff is the pause after attempt n (1 for the first): BaseDelay·2^(n-1)
// capped at MaxDelay, of which a random half is taken off (jitter), so that
// clients failing together do not retry together.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.MaxDelay
	if n-1 < 30 && p.BaseDelay<<(n-1) < p.MaxDelay {
		d = p.BaseDelay << (n - 1)
	}
	half := d / 2
	return d - half + rand.N(half+1)
}

// wait pauses before the attempt after attempt n and reports whether it
// may be made: false when ctx ends first, or when its deadline comes before
// the pause would end.
func (p RetryPolicy) wait(ctx context.Context, n int) bool {
	d := p.backoff(n)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryableStatus reports whether an answer with status may be followed by
// another attempt of a repeatable call: a gateway's or an overloaded
// server's refusal.
func retryableStatus(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryableTransport reports whether a call that failed with err, without
// an answer, may be tried again. A call that cannot count twice
// (repeatable) may be after any transport error but a certificate
// problem or an answer too large; any call may be when the connection could
// not be made at all (a dial error, before any connection was obtained).
func retryableTransport(err error, connected, repeatable bool) bool {
	if errors.Is(err, errTooLarge) || isCertificateError(err) {
		return false
	}
	if repeatable {
		return true
	}
	var op *net.OpError
	return !connected && errors.As(err, &op) && op.Op == "dial"
}

func isCertificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname)
}

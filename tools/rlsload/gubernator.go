package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// getRateLimits is gubernator's native method (gubernator.proto, package
// pb.gubernator, service V1).
const getRateLimits = "/pb.gubernator.V1/GetRateLimits"

// gubernatorCaller calls gubernator's GetRateLimits over ccs (worker w on
// ccs[w % len]): one request per descriptor, named by the descriptor's
// key, with unique key domain_value, hits 1, limit per window. The
// messages are encoded by hand (protowire), so the load generator needs
// none of gubernator's code.
func gubernatorCaller(ccs []*grpc.ClientConn, domain, key string, descriptors, ids int, limit int64, window time.Duration) caller {
	reqs := make([][]byte, ids)
	for i := range reqs {
		for d := range descriptors {
			var r []byte
			r = protowire.AppendTag(r, 1, protowire.BytesType) // name
			r = protowire.AppendString(r, keyOf(key, d))
			r = protowire.AppendTag(r, 2, protowire.BytesType) // unique_key
			r = protowire.AppendString(r, domain+"_"+value(i))
			r = protowire.AppendTag(r, 3, protowire.VarintType) // hits
			r = protowire.AppendVarint(r, 1)
			r = protowire.AppendTag(r, 4, protowire.VarintType) // limit
			r = protowire.AppendVarint(r, uint64(limit))
			r = protowire.AppendTag(r, 5, protowire.VarintType) // duration, ms
			r = protowire.AppendVarint(r, uint64(window.Milliseconds()))
			reqs[i] = protowire.AppendTag(reqs[i], 1, protowire.BytesType) // requests
			reqs[i] = protowire.AppendBytes(reqs[i], r)
		}
	}
	return func(w, i int) (bool, error) {
		var res []byte
		if err := ccs[w%len(ccs)].Invoke(context.Background(), getRateLimits, reqs[i%len(reqs)], &res, grpc.ForceCodec(rawCodec{})); err != nil {
			return false, err
		}
		return underLimit(res, descriptors)
	}
}

// underLimit decodes a GetRateLimitsResp and reports whether all of its
// want responses are UNDER_LIMIT; a response carrying an error, or a count
// other than want, is an error.
func underLimit(b []byte, want int) (bool, error) {
	under, n := true, 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false, protowire.ParseError(l)
		}
		b = b[l:]
		if num != 1 || typ != protowire.BytesType {
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		r, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return false, protowire.ParseError(l)
		}
		b = b[l:]
		n++
		over, err := overLimit(r)
		if err != nil {
			return false, err
		}
		under = under && !over
	}
	if n != want {
		return false, fmt.Errorf("%d responses for %d requests", n, want)
	}
	return under, nil
}

// overLimit decodes a RateLimitResp: whether its status is OVER_LIMIT, or
// its error.
func overLimit(b []byte) (bool, error) {
	over := false
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false, protowire.ParseError(l)
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType: // status
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			over = v == 1
			b = b[l:]
		case num == 5 && typ == protowire.BytesType: // error
			s, l := protowire.ConsumeString(b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			if s != "" {
				return false, errors.New("gubernator: " + s)
			}
			b = b[l:]
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return false, protowire.ParseError(l)
			}
			b = b[l:]
		}
	}
	return over, nil
}

// rawCodec sends a []byte as the encoded message and receives the encoded
// answer into a *[]byte. Its name, proto, makes the content type
// application/grpc+proto, which a gRPC server decodes with its protobuf
// codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: marshal %T", v)
	}
	return b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: unmarshal into %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

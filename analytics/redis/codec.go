package redis

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/analytics"
)

// Bucket widths of the top-list windows, in seconds, and how many buckets
// a window holds (as package analytics keeps them).
const (
	minuteWidth = 10
	hourWidth   = 600
	buckets     = 7
)

// encode returns a part's hash fields.
func encode(p analytics.Part) map[string]any {
	f := make(map[string]any, len(p.Seconds)+len(p.Minutes)+len(p.Top))
	for t, c := range p.Seconds {
		f["s"+strconv.FormatInt(t, 10)] = counts(c)
	}
	for m, c := range p.Minutes {
		f["m"+strconv.FormatInt(m, 10)] = counts(c)
	}
	for k, s := range p.Top {
		b, err := json.Marshal(s)
		if err != nil { // cannot happen: strings and integers
			continue
		}
		f[topField(k.Window, k.Denied, k.Period)] = string(b)
	}
	return f
}

func counts(c analytics.Counts) string {
	return strconv.FormatUint(c.Passed, 10) + " " + strconv.FormatUint(c.Denied, 10)
}

// topField is the field of a top-list bucket: t, the window, r or d, the
// period.
func topField(w analytics.Interval, denied bool, period int64) string {
	kind := "r"
	if denied {
		kind = "d"
	}
	return "t" + string(w) + kind + strconv.FormatInt(period, 10)
}

// decode reads a node's hash back into a part; malformed fields are
// skipped.
func decode(fields map[string]string) analytics.Part {
	p := analytics.Part{Seconds: map[int64]analytics.Counts{}, Minutes: map[int64]analytics.Counts{}, Top: map[analytics.TopKey]analytics.Summary{}}
	for name, v := range fields {
		if name == "" {
			continue
		}
		switch name[0] {
		case 's', 'm':
			t, err := strconv.ParseInt(name[1:], 10, 64)
			c, ok := parseCounts(v)
			if err != nil || !ok {
				continue
			}
			if name[0] == 's' {
				p.Seconds[t] = c
			} else {
				p.Minutes[t] = c
			}
		case 't':
			k, ok := parseTopField(name[1:])
			var s analytics.Summary
			if ok && json.Unmarshal([]byte(v), &s) == nil {
				p.Top[k] = s
			}
		}
	}
	return p
}

func parseCounts(v string) (analytics.Counts, bool) {
	a, b, ok := strings.Cut(v, " ")
	p, err1 := strconv.ParseUint(a, 10, 64)
	d, err2 := strconv.ParseUint(b, 10, 64)
	return analytics.Counts{Passed: p, Denied: d}, ok && err1 == nil && err2 == nil
}

// parseTopField parses what follows "t" in a top-list field.
func parseTopField(s string) (analytics.TopKey, bool) {
	var k analytics.TopKey
	switch {
	case strings.HasPrefix(s, string(analytics.Minute)):
		k.Window, s = analytics.Minute, s[len(analytics.Minute):]
	case strings.HasPrefix(s, string(analytics.Hour)):
		k.Window, s = analytics.Hour, s[len(analytics.Hour):]
	default:
		return k, false
	}
	if s == "" || (s[0] != 'r' && s[0] != 'd') {
		return k, false
	}
	k.Denied = s[0] == 'd'
	period, err := strconv.ParseInt(s[1:], 10, 64)
	k.Period = period
	return k, err == nil
}

// staleFields returns the fields that left the windows between since and
// now: seconds older than an hour, minutes older than a day, buckets older
// than their window.
func staleFields(since, now time.Time) []string {
	var out []string
	from, to := since.Unix(), now.Unix()
	for t := max(from, to-analytics.SecondSlots-60) - analytics.SecondSlots; t < to-analytics.SecondSlots; t++ {
		out = append(out, "s"+strconv.FormatInt(t, 10))
	}
	for m := max(from, to-3600)/60 - analytics.MinuteSlots; m < to/60-analytics.MinuteSlots; m++ {
		out = append(out, "m"+strconv.FormatInt(m, 10))
	}
	for _, w := range []struct {
		iv    analytics.Interval
		width int64
	}{{analytics.Minute, minuteWidth}, {analytics.Hour, hourWidth}} {
		for p := max(from, to-3600)/w.width - buckets; p <= to/w.width-buckets; p++ {
			out = append(out, topField(w.iv, false, p), topField(w.iv, true, p))
		}
	}
	return out
}

// sortKeys sorts keys by workspace, then namespace.
func sortKeys(keys []analytics.Key) {
	slices.SortFunc(keys, func(a, b analytics.Key) int {
		if c := cmp.Compare(a.Workspace, b.Workspace); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
}

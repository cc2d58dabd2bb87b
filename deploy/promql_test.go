package deploy

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// promqlFuncs are PromQL's functions and aggregation operators: an
// identifier followed by '(' must be one of them.
var promqlFuncs = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`abs absent absent_over_time acos acosh asin asinh atan atanh
		avg_over_time ceil changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month
		day_of_week day_of_year days_in_month deg delta deriv double_exponential_smoothing exp floor
		histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev
		histogram_stdvar histogram_sum holt_winters hour idelta increase irate label_join
		label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute
		month pi predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn
		sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
		stdvar_over_time sum_over_time tan tanh time timestamp vector year
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`) {
		promqlFuncs[f] = true
	}
}

// promqlLabelLists are the keywords followed by a list of label names.
var promqlLabelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlKeywords are the other identifiers that name no metric.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}

// token is one lexeme of a PromQL expression.
type token struct {
	kind byte   // 'i' identifier, 's' string, 'n' number, 'v' $variable, or the punctuation itself
	text string // identifier, string contents, or the punctuation
}

// lexPromQL splits expr into tokens; the insides of [...] (ranges,
// subqueries) are left out, and a label matcher's operator is one token.
func lexPromQL(expr string) ([]token, error) {
	var out []token
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, token{'s', expr[i+1 : j]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated [ at %d", i)
			}
			i += j + 1
		case isIdent(c, true) || c == '$':
			j := i + 1
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			kind := byte('i')
			if c == '$' {
				kind = 'v'
			}
			out = append(out, token{kind, expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i + 1
			for j < len(expr) && (isIdent(expr[j], false) || expr[j] == '.' || ((expr[j] == '-' || expr[j] == '+') && (expr[j-1] == 'e' || expr[j-1] == 'E'))) {
				j++
			}
			out = append(out, token{'n', expr[i:j]})
			i = j
		default:
			out = append(out, token{c, string(c)})
			i++
		}
	}
	return out, nil
}

// promqlRefs is what one PromQL expression refers to.
type promqlRefs struct {
	metrics []string // metric names (as written: with _bucket, _count...)
	labels  []string // label names in matchers and in by/without/on/ignoring lists
	created []string // labels that label_replace or label_join create
}

// frame is one open parenthesis: the function it calls ("" for none) and
// the commas seen at its level.
type frame struct {
	fn     string
	commas int
}

// parsePromQL returns the metrics and labels that expr refers to. An
// identifier is a metric unless it is a function (followed by '('), a
// keyword, or a label name (inside {...} or a label list); an identifier
// followed by '(' that is no PromQL function is an error.
func parsePromQL(expr string) (promqlRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promqlRefs{}, err
	}
	var refs promqlRefs
	var stack []frame
	next := func(i int) byte {
		if i+1 < len(toks) {
			return toks[i+1].kind
		}
		return 0
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch tk.kind {
		case '{':
			j, labels, err := matcherLabels(toks, i+1)
			if err != nil {
				return refs, err
			}
			refs.labels = append(refs.labels, labels...)
			i = j
		case '(':
			stack = append(stack, frame{})
		case ')':
			if len(stack) == 0 {
				return refs, fmt.Errorf("unbalanced )")
			}
			stack = stack[:len(stack)-1]
		case ',':
			if len(stack) > 0 {
				stack[len(stack)-1].commas++
			}
		case 's':
			if n := len(stack); n > 0 && (stack[n-1].fn == "label_replace" || stack[n-1].fn == "label_join") && stack[n-1].commas == 1 {
				refs.created = append(refs.created, tk.text)
			}
		case 'i':
			switch {
			case promqlLabelLists[tk.text]:
				if next(i) == '(' {
					j := i + 2
					for ; j < len(toks) && toks[j].kind != ')'; j++ {
						if toks[j].kind == 'i' {
							refs.labels = append(refs.labels, toks[j].text)
						}
					}
					i = j
				}
			case promqlKeywords[strings.ToLower(tk.text)]:
			case promqlFuncs[tk.text] && next(i) == 'i' && promqlLabelLists[toks[i+1].text]:
				// an aggregation whose by/without list comes first
			case next(i) == '(':
				if !promqlFuncs[tk.text] {
					return refs, fmt.Errorf("%s( is no PromQL function", tk.text)
				}
				stack = append(stack, frame{fn: tk.text})
				i++ // the '(' opened the frame
			default:
				refs.metrics = append(refs.metrics, tk.text)
			}
		}
	}
	if len(stack) != 0 {
		return refs, fmt.Errorf("unbalanced (")
	}
	return refs, nil
}

// matcherLabels reads the label matchers from toks[i] to the closing '}'
// and returns its index and the label names.
func matcherLabels(toks []token, i int) (int, []string, error) {
	var labels []string
	for ; i < len(toks); i++ {
		switch toks[i].kind {
		case '}':
			return i, labels, nil
		case 'i':
			labels = append(labels, toks[i].text)
			// skip the operator (=, !=, =~, !~) and the value
			for i+1 < len(toks) && toks[i+1].kind != 's' {
				i++
			}
			i++
		case ',':
		default:
			return i, nil, fmt.Errorf("unexpected %q in a label matcher", toks[i].text)
		}
	}
	return i, nil, fmt.Errorf("unterminated {")
}

// family is one metric family of a Prometheus text exposition.
type family struct {
	typ    string          // counter, gauge, histogram, summary, untyped
	labels map[string]bool // label names seen on its samples
}

// exposition maps each family's name to it.
type exposition map[string]*family

// parseExposition parses the Prometheus text format: its # TYPE lines and
// the label names of its samples.
func parseExposition(text string) (exposition, error) {
	exp := exposition{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			exp[name] = &family{typ: typ, labels: map[string]bool{}}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		f := exp.family(name)
		if f == nil {
			f = &family{typ: "untyped", labels: map[string]bool{}}
			exp[name] = f
		}
		for _, l := range labels {
			f.labels[l] = true
		}
	}
	return exp, sc.Err()
}

// family returns the family of a sample or series name: name itself, or
// the histogram or summary whose _bucket, _sum or _count it is.
func (exp exposition) family(name string) *family {
	if f := exp[name]; f != nil {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if f := exp[base]; ok && f != nil && (f.typ == "histogram" || (f.typ == "summary" && suffix != "_bucket")) {
			return f
		}
	}
	return nil
}

// parseSample returns the name and the label names of a sample line.
func parseSample(line string) (string, []string, error) {
	end := strings.IndexAny(line, "{ ")
	if end < 0 {
		return "", nil, fmt.Errorf("sample line without value: %q", line)
	}
	name := line[:end]
	var labels []string
	if line[end] == '{' {
		for i := end + 1; i < len(line) && line[i] != '}'; {
			eq := strings.IndexByte(line[i:], '=')
			if eq < 0 || i+eq+1 >= len(line) || line[i+eq+1] != '"' {
				return "", nil, fmt.Errorf("bad labels in %q", line)
			}
			labels = append(labels, strings.TrimSpace(line[i:i+eq]))
			j := i + eq + 2
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
			if i < len(line) && line[i] == ',' {
				i++
			}
		}
	}
	return name, labels, nil
}

func TestParsePromQL(t *testing.T) {
	cases := []struct {
		name                     string
		expr                     string
		metrics, labels, created []string
		err                      bool
	}{
		{name: "selector", expr: `up`, metrics: []string{"up"}},
		{name: "rate with matchers and by",
			expr:    `sum by (outcome) (rate(sluice_x_total{namespace=~"$namespace", a!="b"}[$__rate_interval]))`,
			metrics: []string{"sluice_x_total"}, labels: []string{"outcome", "namespace", "a"}},
		{name: "histogram quantile",
			expr:    `histogram_quantile(0.99, sum by (le, endpoint) (rate(h_bucket{}[5m])))`,
			metrics: []string{"h_bucket"}, labels: []string{"le", "endpoint"}},
		{name: "binary with numbers and keywords",
			expr:    `sum(rate(a[1m])) / clamp_min(sum(rate(b[1m])), 1e-9) > bool 0 or on (instance) c`,
			metrics: []string{"a", "b", "c"}, labels: []string{"instance"}},
		{name: "by after the aggregation", expr: `max(g) by (kind)`, metrics: []string{"g"}, labels: []string{"kind"}},
		{name: "label_replace creates a label",
			expr:    `sum by (rl) (label_replace(rate(d{outcome="denied"}[1m]), "rl", "$1", "namespace", "(.*)"))`,
			metrics: []string{"d"}, labels: []string{"rl", "outcome"}, created: []string{"rl"}},
		{name: "string with a brace", expr: `m{a="}{"}`, metrics: []string{"m"}, labels: []string{"a"}},
		{name: "unknown function", expr: `rat(m[1m])`, err: true},
		{name: "unbalanced", expr: `sum(rate(m[1m])`, err: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := parsePromQL(tc.expr)
			if tc.err {
				if err == nil {
					t.Fatalf("no error; refs %+v", refs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameSet(refs.metrics, tc.metrics) || !sameSet(refs.labels, tc.labels) || !sameSet(refs.created, tc.created) {
				t.Fatalf("got metrics %v labels %v created %v; want %v %v %v", refs.metrics, refs.labels, refs.created, tc.metrics, tc.labels, tc.created)
			}
		})
	}
}

func TestParseExposition(t *testing.T) {
	text := "# HELP h A histogram.\n# TYPE h histogram\n" +
		`h_bucket{endpoint="limit",le="0.1"} 1` + "\n" + `h_sum{endpoint="limit"} 0.05` + "\n" + `h_count{endpoint="limit"} 1` + "\n" +
		"# TYPE c counter\n" + `c{reason="a \"quoted\", comma",class="x"} 3` + "\n" + "# TYPE g gauge\ng 1\n"
	exp, err := parseExposition(text)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, series, typ string
		labels            []string
	}{
		{"histogram bucket", "h_bucket", "histogram", []string{"endpoint", "le"}},
		{"histogram count", "h_count", "histogram", []string{"endpoint", "le"}},
		{"counter with escaped value", "c", "counter", []string{"reason", "class"}},
		{"gauge without labels", "g", "gauge", nil},
		{"absent", "nope", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := exp.family(tc.series)
			if tc.typ == "" {
				if f != nil {
					t.Fatalf("found %+v", f)
				}
				return
			}
			if f == nil || f.typ != tc.typ || !sameSet(keys(f.labels), tc.labels) {
				t.Fatalf("got %+v; want %s with labels %v", f, tc.typ, tc.labels)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/weir-io/weir/internal/metrics/metricstest"
	"github.com/weir-io/weir/internal/testenv"
)

const (
	rulesFile     = "prometheus/weir-alerts.yml"
	ruleTestsFile = "prometheus/weir-alerts_test.yml"
	dashboardFile = "grafana/weir.json"
	runbookDoc    = "docs/operations/alerts.md"
	runbookBase   = "https://github.com/weir-io/weir/blob/main/" + runbookDoc + "#"
)

// promtoolBin is Prometheus's promtool, or the test is Unavailable (skips
// loudly; fails under WEIR_REQUIRE_SERVICES=1, as in CI, which installs
// it).
func promtoolBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it): "+
			"the alert rules cannot be checked by Prometheus's own tool")
	}
	return p
}

// TestPromtool: `promtool check rules` accepts the rules, and `promtool
// test rules` passes their unit tests.
func TestPromtool(t *testing.T) {
	bin := promtoolBin(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(rulesFile)},
		{"test", "rules", filepath.Base(ruleTestsFile)},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert       string
			Record      string
			Expr        string
			For         string
			Labels      map[string]string
			Annotations map[string]string
		}
	}
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string
		InputSeries []struct {
			Series string
			Values string
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRules: every rule is an alert with a severity and a summary,
// points at its own section of docs/operations/alerts.md, has a unit test
// that makes it fire and one in which it stays quiet, and names only
// metrics the daemon exports and the catalogue lists — in its expression
// and in its tests' input series, so that a misspelt series cannot make a
// quiet test pass.
func TestAlertRules(t *testing.T) {
	var rules ruleFile
	readYAML(t, rulesFile, &rules)
	var tests ruleTests
	readYAML(t, ruleTestsFile, &tests)
	anchors := headingAnchors(t, metricstest.RepoFile(t, runbookDoc))
	names := newNameCheck(t)

	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: recording rule %q: this file holds alerts only", g.Name, r.Record)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("%s: severity %q, want page or ticket", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookBase)
			if !ok || anchor != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url %q, want %s%s", r.Alert, url, runbookBase, strings.ToLower(r.Alert))
			} else if !anchors[anchor] {
				t.Errorf("%s: %s has no section %q", r.Alert, runbookDoc, anchor)
			}
			names.expr(r.Alert, r.Expr)
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}

	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(rulesFile)}) {
		t.Errorf("%s loads %v, want [%s]", ruleTestsFile, tests.RuleFiles, filepath.Base(rulesFile))
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			names.series(tc.Name, s.Series)
		}
		fired := map[string]bool{}
		tested := map[string]bool{}
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("test %q checks %s, which is not in %s", tc.Name, a.Alertname, rulesFile)
			}
			tested[a.Alertname] = true
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
				fires[a.Alertname] = true
			}
		}
		for a := range tested {
			if !fired[a] {
				quiet[a] = true
			}
		}
	}
	for a := range alerts {
		if !fires[a] {
			t.Errorf("%s: no test group in %s makes it fire", a, ruleTestsFile)
		}
		if !quiet[a] {
			t.Errorf("%s: no test group in %s checks it stays quiet", a, ruleTestsFile)
		}
	}
	// Every section of the runbook is an alert's.
	for a := range anchors {
		if strings.HasPrefix(a, "weir") && !alerts[alertNamed(rules, a)] {
			t.Errorf("%s: section %q is not an alert's", runbookDoc, a)
		}
	}
}

// alertNamed is the alert whose anchor is a, or "".
func alertNamed(rules ruleFile, a string) string {
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if strings.ToLower(r.Alert) == a {
				return r.Alert
			}
		}
	}
	return ""
}

// headingAnchors lists the anchors GitHub makes of a Markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return out
}

// The six concerns of the dashboard, one row each, in this order.
var dashboardRows = []string{"Ingest", "Buffer and drain", "Sinks and recovery", "Flow control", "Quality", "Coordination"}

type dashboard struct {
	UID           string
	Title         string
	SchemaVersion int
	Templating    struct {
		List []struct {
			Name       string
			Type       string
			Query      any
			Datasource *datasource
		}
	}
	Panels []panel
}

type datasource struct {
	Type string
	UID  string
}

type panel struct {
	ID          int
	Type        string
	Title       string
	Description string
	Datasource  *datasource
	GridPos     struct{ H, W, X, Y int }
	Panels      []panel
	Targets     []struct {
		RefID      string
		Expr       string
		Datasource *datasource
	}
}

// TestDashboard: deploy/grafana/weir.json imports as is — a schema version,
// a Prometheus data source chosen by a variable, job and instance
// variables — has one row per concern, every panel has a data source, a
// description and queries, ids are unique and panels do not overlap; every
// query parses as PromQL once Grafana's variables are substituted, and
// names only metrics the daemon exports and the catalogue lists.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schema version 36 or later (Grafana 9+)", d.UID, d.Title, d.SchemaVersion)
	}
	names := newNameCheck(t)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		qs, _ := q["query"].(string)
		if s, ok := v.Query.(string); ok {
			qs = s
		}
		m := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`).FindStringSubmatch(qs)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, qs)
			continue
		}
		names.expr("variable "+v.Name, substitute(m[1]))
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s: data source %+v, want the datasource variable", v.Name, v.Datasource)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("no %s variable %q (variables: %v)", typ, name, vars)
		}
	}

	var rows []string
	ids := map[int]string{}
	var placed []panel
	inRow := 0
	for _, p := range d.Panels {
		if prev, ok := ids[p.ID]; ok || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for _, q := range placed {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				t.Errorf("panels %q %+v and %q %+v overlap", p.Title, g, q.Title, o)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			if len(rows) > 0 && inRow == 0 {
				t.Errorf("row %q has no panels", rows[len(rows)-1])
			}
			if len(p.Panels) > 0 {
				t.Errorf("row %q is collapsed: keep its panels on the dashboard", p.Title)
			}
			rows = append(rows, p.Title)
			inRow = 0
			continue
		}
		inRow++
		where := fmt.Sprintf("panel %q", p.Title)
		if len(rows) == 0 {
			t.Errorf("%s comes before any row", where)
		}
		if p.Description == "" {
			t.Errorf("%s: no description", where)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: data source %+v, want prometheus ${datasource}", where, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("%s query %s: data source %+v, want ${datasource}", where, q.RefID, q.Datasource)
			}
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("%s query %s: empty", where, q.RefID)
				continue
			}
			names.expr(where+" query "+q.RefID, substitute(q.Expr))
		}
	}
	if inRow == 0 && len(rows) > 0 {
		t.Errorf("row %q has no panels", rows[len(rows)-1])
	}
	if !slices.Equal(rows, dashboardRows) {
		t.Errorf("rows %q, want %q", rows, dashboardRows)
	}
}

// grafanaVar is a dashboard variable in a query: $name, ${name} or
// ${name:format}, Grafana's built-in intervals included.
var grafanaVar = regexp.MustCompile(`\$\{?(__rate_interval|__interval|__range|[A-Za-z_][A-Za-z0-9_]*)(:[a-z]+)?\}?`)

// substitute replaces Grafana's variables in a query the way Grafana
// would before sending it: intervals by a duration, other variables by a
// regular expression that matches anything (they sit in =~ matchers).
func substitute(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		switch m := grafanaVar.FindStringSubmatch(v); m[1] {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		default:
			return ".*"
		}
	})
}

// nameCheck parses PromQL and checks the metric names it selects.
type nameCheck struct {
	t       *testing.T
	p       parser.Parser
	cat     map[string]bool
	reg     map[string]bool
	checked map[string]bool
}

func newNameCheck(t *testing.T) *nameCheck {
	return &nameCheck{t: t, p: parser.NewParser(parser.Options{}),
		cat: metricstest.Catalogue(t), reg: metricstest.Registry(t), checked: map[string]bool{}}
}

// expr parses a PromQL expression and checks every metric it selects.
func (c *nameCheck) expr(where, q string) {
	c.t.Helper()
	e, err := c.p.ParseExpr(q)
	if err != nil {
		c.t.Errorf("%s: %q does not parse as PromQL: %v", where, q, err)
		return
	}
	n := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			n++
			c.name(where, selectorName(vs))
		}
		return nil
	})
	if n == 0 {
		c.t.Errorf("%s: %q selects no metric", where, q)
	}
}

// series checks the metric of a promtool input series ("name{labels}").
func (c *nameCheck) series(where, s string) {
	c.t.Helper()
	lbls, err := c.p.ParseMetric(s)
	if err != nil {
		c.t.Errorf("%s: series %q: %v", where, s, err)
		return
	}
	c.name(where, lbls.Get("__name__"))
}

func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" {
			return m.Value
		}
	}
	return ""
}

// prometheusOwn are series Prometheus makes itself, for every target.
var prometheusOwn = map[string]bool{"up": true}

// name checks that a metric is exported by the daemon and listed in the
// catalogue; a histogram's _bucket, _sum and _count series count as the
// histogram.
func (c *nameCheck) name(where, name string) {
	c.t.Helper()
	if name == "" {
		c.t.Errorf("%s: a selector without a metric name", where)
		return
	}
	if prometheusOwn[name] || c.checked[name] {
		return
	}
	c.checked[name] = true
	family := name
	if !c.reg[family] {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && c.reg[base] {
				family = base
			}
		}
	}
	if !c.reg[family] {
		c.t.Errorf("%s: %s is not a metric the daemon exports", where, name)
	}
	if !metricstest.InCatalogue(c.cat, family) {
		c.t.Errorf("%s: %s is not in docs/monitoring.md", where, name)
	}
}

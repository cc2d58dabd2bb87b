package main

import (
	"os"
	"regexp"
	"testing"

	"github.com/sluicehq/sluice/server/rls"
)

// rlsConfigPage is docs/reference/rls-config.md.
const rlsConfigPage = "../../docs/reference/rls-config.md"

// TestRLSConfigExamples loads every example of rules in
// docs/reference/rls-config.md (a YAML block whose first line is
// "# rules: FILE") as `sluice serve --rls-config` would.
func TestRLSConfigExamples(t *testing.T) {
	page, err := os.ReadFile(rlsConfigPage)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n# rules: (\\S+)\n(.*?)```").FindAllSubmatch(page, -1)
	if len(blocks) == 0 {
		t.Fatalf("%s has no example of rules (a YAML block starting with \"# rules: FILE\")", rlsConfigPage)
	}
	for _, b := range blocks {
		name := string(b[1])
		t.Run(name, func(t *testing.T) {
			if _, err := rls.Parse(name, b[2]); err != nil {
				t.Error(err)
			}
		})
	}
}

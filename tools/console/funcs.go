package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/heedhq/heed/tools/bridge"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"pct":   func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"clock": func(t time.Time) string { return t.Local().Format("15:04:05") },
	"inc":   func(i int) int { return i + 1 },
	"words": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"until": func(t time.Time) string {
		d := time.Until(t).Round(time.Second)
		if d < 0 {
			return "0s"
		}
		return d.String()
	},
	"labelOf": func(o bridge.Offer, value string) string {
		for _, x := range o.Options {
			if x.Value == value {
				return x.Label
			}
		}
		return value
	},
}

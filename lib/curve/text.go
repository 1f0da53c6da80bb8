package curve

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Write prints a scored curve as potato-dispatch curve reports it: per
// schema, a table of the points (training items, accuracy and macro-F1,
// the two standard errors of macro-F1, from the test items and from the
// draws, each label's F1, each with its change from the point before),
// then the schema's sentence and one per label.
func Write(w io.Writer, c Curve) error {
	var b strings.Builder
	for i, s := range c.Schemas {
		if i > 0 {
			b.WriteString("\n")
		}
		// A curve scored before draws has none recorded: it had one.
		n := max(s.Draws, 1)
		draws := "draws"
		if n == 1 {
			draws = "draw"
		}
		fmt.Fprintf(&b, "%s (%s): %d labelled items in the train split, %d %s at each point, scored on %d test items\n", s.Schema, s.Kind, s.NTrainSplit, n, draws, s.NTest)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := []string{"  POINT", "ITEMS", "ACCURACY", "CHANGE", "MACRO-F1", "SE TEST", "SE DRAWS", "CHANGE"}
		var labels []string
		if len(s.Points) > 0 {
			for _, l := range s.Points[len(s.Points)-1].Labels {
				labels = append(labels, l.Label)
				head = append(head, "F1 "+strings.ToUpper(l.Label)+" (ITEMS)", "CHANGE")
			}
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, p := range s.Points {
			row := []string{"  " + Format(p.Percent) + "%", fmt.Sprint(p.NTrain), fmt.Sprintf("%.3f", p.Accuracy), delta(p.DAccuracy),
				fmt.Sprintf("%.3f", p.MacroF1), fmt.Sprintf("%.3f", p.SETest), seDraws(s.Draws, p.SEDraws), delta(p.DMacroF1)}
			for _, name := range labels {
				l := labelOf(p, name)
				row = append(row, fmt.Sprintf("%.3f (%d)", l.F1, l.NTrain), delta(l.DF1))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if s.Sentence != "" {
			b.WriteString(s.Sentence + "\n")
		}
		for _, l := range s.Labels {
			b.WriteString("  " + l.Sentence + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func delta(d *float64) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%+.3f", *d)
}

func seDraws(draws int, se float64) string {
	if draws < 2 {
		return "-"
	}
	return fmt.Sprintf("%.3f", se)
}

package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"potato-training/lib/rundir"
)

// WriteAcceptance prints the report as potato-dispatch report does. An
// annotator's name is what they registered with, so control characters
// are shown escaped (rundir.CleanText), never sent to the terminal.
func WriteAcceptance(w io.Writer, a *Acceptance) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Acceptance of prelabels, project %q\n", a.Project)
	for _, sa := range a.Schemas {
		fmt.Fprintf(&b, "\n%s (%s): run %s (%s)", sa.Schema, sa.Kind, sa.RunID, sa.Trainer)
		if sa.PublishedAt != nil {
			fmt.Fprintf(&b, ", published %s", sa.PublishedAt.Format(time.RFC3339))
		}
		fmt.Fprintf(&b, "\n  trained on bundle %s", orNone(sa.BundleDigest))
		if h := sa.Heldout; h != nil {
			fmt.Fprintf(&b, "; held-out accuracy %.3f, macro-F1 %.3f", h.Accuracy, h.MacroF1)
			if h.N > 0 {
				fmt.Fprintf(&b, " on %d test items", h.N)
			}
		}
		fmt.Fprintf(&b, "\n  %d prelabels on items unlabeled in its bundle; %d of those items labelled since\n", sa.NPrelabels, sa.NItemsLabeled)
		fmt.Fprintf(&b, "  %d labels on them, %d equal to the prelabel: %s\n", sa.All.N, sa.All.Accepted, shareText(sa.All))
		if sa.NItemsAnsweredWithoutLabel > 0 {
			fmt.Fprintf(&b, "  %d items left out: an annotator's answer on them has no label, so their labels may predate the bundle\n", sa.NItemsAnsweredWithoutLabel)
		}
		if sa.NBeforePublish > 0 {
			fmt.Fprintf(&b, "  %d labels left out: their annotator's user_state.json was last written before the run published\n", sa.NBeforePublish)
		}
		if len(sa.Annotators) > 0 {
			writeTallies(&b, "by annotator", sa.Annotators)
			writeTallies(&b, "by prelabel label", sa.Labels)
		}
	}
	if len(a.Schemas) > 1 && len(a.Annotators) > 0 {
		b.WriteString("\nall schemas\n")
		writeTallies(&b, "by annotator", a.Annotators)
	}
	if len(a.Flags) > 0 {
		b.WriteString("\nflags\n")
		for _, f := range a.Flags {
			where := "all schemas"
			if f.Schema != "" {
				where = f.Schema
			}
			fmt.Fprintf(&b, "  %s %q in %s: %d of %d accepted (%.3f): %s", f.Kind, f.Name, where, f.Accepted, f.N, f.Share, f.Reason)
			if f.PIfHeldout != nil {
				fmt.Fprintf(&b, "; chance of so many if they agreed only as often as the held-out accuracy: %.2g", *f.PIfHeldout)
			}
			b.WriteString("\n")
		}
	} else if len(a.Schemas) > 0 {
		b.WriteString("\nflags: none\n")
	}
	if len(a.Notes) > 0 {
		b.WriteString("\nnotes\n")
		for _, n := range a.Notes {
			wrap(&b, "  ", n)
		}
	}
	b.WriteString("\nHow \"saw its prelabel\" is decided:\n")
	wrap(&b, "  ", a.SawPrelabel)
	b.WriteString("How \"accepted\" is decided:\n")
	wrap(&b, "  ", a.Accepted)
	_, err := io.WriteString(w, rundir.CleanText(b.String()))
	return err
}

func writeTallies(b *strings.Builder, title string, ts []Tally) {
	width := len(title) - 2
	for _, t := range ts {
		width = max(width, len(t.Name))
	}
	fmt.Fprintf(b, "  %-*s  %6s  %8s  %5s  %s\n", width+2, title, "labels", "accepted", "share", "95% CI")
	for _, t := range ts {
		line := fmt.Sprintf("    %-*s  %6d  %8d  %.3f  %.2f-%.2f", width, t.Name, t.N, t.Accepted, t.Share, t.CILow, t.CIHigh)
		if t.Flag != "" {
			line += "  flag: " + t.Flag
		}
		b.WriteString(line + "\n")
	}
}

func shareText(t Tally) string {
	if t.N == 0 {
		return "no share (no labels)"
	}
	return fmt.Sprintf("%.3f (95%% CI %.2f-%.2f)", t.Share, t.CILow, t.CIHigh)
}

func orNone(s string) string {
	if s == "" {
		return "(no digest recorded)"
	}
	return s
}

// wrap writes text in lines of at most 78 columns, each after indent.
func wrap(b *strings.Builder, indent, text string) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > 78 {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
}

// WriteExplanation prints an item's provenance as potato-dispatch explain
// does.
func WriteExplanation(w io.Writer, e *Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "item %s\n", e.Item)
	for _, is := range e.Schemas {
		fmt.Fprintf(&b, "\n%s (%s)\n", is.Schema, orKind(string(is.Kind)))
		if p := is.Prelabel; p != nil {
			fmt.Fprintf(&b, "  prelabel: %s", labelsText(p.Labels, p.Payload))
			if p.Confidence != nil {
				fmt.Fprintf(&b, ", confidence %.3f", *p.Confidence)
			} else {
				b.WriteString(", confidence none recorded")
			}
			fmt.Fprintf(&b, "\n  made by run %s (%s, %s)", p.RunID, orKind(p.Trainer), orKind(p.RunStatus))
			if p.PublishedAt != nil {
				fmt.Fprintf(&b, ", published %s", p.PublishedAt.Format(time.RFC3339))
			}
			b.WriteString("\n")
			if h := p.Heldout; h != nil {
				fmt.Fprintf(&b, "  its held-out score: accuracy %.3f, macro-F1 %.3f", h.Accuracy, h.MacroF1)
				if h.N > 0 {
					fmt.Fprintf(&b, " on %d test items", h.N)
				}
				b.WriteString("\n")
			} else {
				b.WriteString("  its held-out score: none recorded\n")
			}
			fmt.Fprintf(&b, "  trained on bundle %s", orNone(p.BundleDigest))
			if p.Split != "" {
				fmt.Fprintf(&b, "; the item was in its %s split", p.Split)
			}
			b.WriteString("\n")
		} else {
			b.WriteString("  prelabel: none\n")
		}
		if len(is.Annotators) == 0 {
			b.WriteString("  annotators: none has labelled it\n")
			continue
		}
		b.WriteString("  annotators now:\n")
		for _, al := range is.Annotators {
			fmt.Fprintf(&b, "    %s: %s", al.Annotator, targetText(al.Label))
			if al.Accepted != nil {
				if *al.Accepted {
					b.WriteString(" (the prelabel)")
				} else {
					b.WriteString(" (not the prelabel)")
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, rundir.CleanText(b.String()))
	return err
}

func orKind(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func labelsText(labels []string, payload []byte) string {
	if len(labels) == 0 {
		if string(payload) == "[]" {
			return "no label"
		}
		return string(payload)
	}
	return strings.Join(labels, ", ")
}

func targetText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []string:
		if len(t) == 0 {
			return "no label"
		}
		return strings.Join(t, ", ")
	case float64:
		return fmt.Sprintf("%g", t)
	}
	return fmt.Sprintf("%v", v)
}

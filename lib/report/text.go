package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"potato-training/lib/project"
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
			if len(h.Precision) > 0 {
				var ps []string
				for _, p := range h.Precision {
					ps = append(ps, fmt.Sprintf("%s %.3f (%d of %d)", p.Label, p.Precision, p.Agreed, p.Predicted))
				}
				fmt.Fprintf(&b, "\n  held-out precision by predicted label: %s", strings.Join(ps, ", "))
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
			writeBias(&b, sa.Annotators)
		}
		writeReview(&b, sa.Review)
	}
	if len(a.Schemas) > 1 && len(a.Annotators) > 0 {
		b.WriteString("\nall schemas\n")
		writeTallies(&b, "by annotator", a.Annotators)
		writeBias(&b, a.Annotators)
	}
	if len(a.Flags) > 0 {
		b.WriteString("\nflags\n")
		for _, f := range a.Flags {
			where := "all schemas"
			if f.Schema != "" {
				where = f.Schema
			}
			fmt.Fprintf(&b, "  %s %q in %s: %d of %d accepted (%.3f): %s\n", f.Kind, f.Name, where, f.Accepted, f.N, f.Share, f.Reason)
		}
	} else if len(a.Schemas) > 0 {
		b.WriteString("\nflags: none\n")
	}
	if fam := a.BiasFamily; fam.Tests > 0 {
		fmt.Fprintf(&b, "\nautomation-bias tests: %d with a p-value, %d of them able to be significant and corrected for (generalized Holm: two or more careful annotators flagged with a chance of at most %g%%), %d flagged\n",
			fam.Tests, fam.Counted, 100*fam.Alpha, fam.Flagged)
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
	if a.BiasRule != "" {
		b.WriteString("How an annotator is flagged for automation bias:\n")
		wrap(&b, "  ", a.BiasRule)
	}
	if a.ReviewRule != "" {
		b.WriteString("How reviewers' verdicts count:\n")
		wrap(&b, "  ", a.ReviewRule)
	}
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

// writeReview prints a run's precision as Potato's reviewers judged it,
// in all and by the prelabel's label.
func writeReview(b *strings.Builder, r *Review) {
	if r == nil {
		return
	}
	if r.All.N == 0 {
		b.WriteString("  reviewers' verdicts (Potato's model review): none on this run's prelabels\n")
		return
	}
	by := fmt.Sprintf("%d reviewers", r.Reviewers)
	if r.Reviewers == 1 {
		by = "1 reviewer"
	}
	fmt.Fprintf(b, "  reviewers' verdicts (Potato's model review): %d by %s, %d accept, %d correct, %d reject: precision %s\n",
		r.All.N, by, r.All.Accept, r.All.Correct, r.All.Reject, precisionText(r.All))
	if r.NReplaced > 0 {
		fmt.Fprintf(b, "  %d of these verdicts are on prelabels the run no longer holds in the store\n", r.NReplaced)
	}
	title := "by prelabel label"
	width := len(title) - 2
	for _, c := range r.Labels {
		width = max(width, len(c.Name))
	}
	fmt.Fprintf(b, "  %-*s  %8s  %6s  %7s  %6s  %9s  %s\n", width+2, title, "verdicts", "accept", "correct", "reject", "precision", "95% CI")
	for _, c := range r.Labels {
		fmt.Fprintf(b, "    %-*s  %8d  %6d  %7d  %6d  %9.3f  %.2f-%.2f\n", width, c.Name, c.N, c.Accept, c.Correct, c.Reject, c.Precision, c.CILow, c.CIHigh)
	}
}

func precisionText(c ReviewCount) string {
	return fmt.Sprintf("%.3f (95%% CI %.2f-%.2f)", c.Precision, c.CILow, c.CIHigh)
}

// writeBias prints each annotator's automation-bias test.
func writeBias(b *strings.Builder, ts []Tally) {
	some := false
	for _, t := range ts {
		some = some || t.Bias != nil
	}
	if !some {
		return
	}
	b.WriteString("  agreement with the prelabels against a careful annotator's (automation-bias test)\n")
	for _, t := range ts {
		if t.Bias != nil {
			wrap(b, "    ", t.Name+": "+BiasText(t.Bias))
		}
	}
}

// BiasText says an annotator's test in words: what was observed, what a
// careful annotator would reach, the p-value and what follows.
func BiasText(bt *BiasTest) string {
	var s string
	if bt.N == 0 {
		s = "no label tested"
	} else {
		s = fmt.Sprintf("%d of %d agreed (%.3f), a careful annotator %.3f; p = %s", bt.Agreed, bt.N, bt.Observed, bt.Expected, pText(*bt.PValue))
	}
	switch bt.Verdict {
	case VerdictFlagged:
		s += fmt.Sprintf(", below its level %.2g: flagged, possible automation bias (consistent with accepting prelabels unchecked, not proof of it)", bt.Level)
	case VerdictNotAbove:
		s += ": no more often than expected"
	case VerdictCannotTell:
		if !bt.Counted {
			s += ": too few labels to be significant even were every one the prelabel"
		} else {
			s += fmt.Sprintf(", above its level %.2g: not significant", bt.Level)
		}
		if bt.ItemsNeeded != nil {
			s += fmt.Sprintf("; about %d more labels (%d in all) would show agreement at this rate 80%% of the time, at level %.2g", *bt.MoreItems, *bt.ItemsNeeded, bt.PowerLevel)
		} else {
			s += fmt.Sprintf("; no number of labels up to %d would show agreement at this rate 80%% of the time at level %.2g: the test split is too small to tell it from the model's own accuracy", MaxItemsNeeded, bt.PowerLevel)
		}
	case VerdictNoReference:
		s += ": the run's test split says nothing of these prelabels' labels"
	}
	if bt.NNoReference > 0 {
		s += fmt.Sprintf(" (%d labels not tested: the model never predicted their prelabel's label on the test split, or the run recorded no held-out score)", bt.NNoReference)
	}
	return s
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
	case []project.Span:
		return spansText(t)
	}
	return fmt.Sprintf("%v", v)
}

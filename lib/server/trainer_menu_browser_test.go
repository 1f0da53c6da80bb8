package server

import (
	"context"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"

	"potato-training/lib/config"
	"potato-training/lib/trainer"
)

// TestPageTrainerMenu: in a real headless Chromium, the start form's
// trainer menu offers only the trainers that learn every ticked schema, as
// the registry's kinds say: all of them for a radio schema, those that
// learn ordinal schemas once a likert one is ticked too, and none, with a
// note naming the kind and what would learn it and the start button off,
// for a text schema.
func TestPageTrainerMenu(t *testing.T) {
	exe := chromium(t)
	e := newAPI(t, testKey, "")
	e.s.Config.Schemes = append(e.s.Config.Schemes,
		config.Scheme{Name: "mood", AnnotationType: "likert", Kind: config.KindOrdinal},
		config.Scheme{Name: "notes", AnnotationType: "text", Kind: config.KindOther})
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	b := &browser{t: t, ctx: ctx, url: e.ts.URL, e: e}
	b.do("signing in", chromedp.Navigate(b.url+pagePath), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SetValue(chromedp.ID("key"), testKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("backend")))

	offered := func() []string {
		return eval[[]string](b, `Array.from(document.querySelectorAll('#trainer option')).filter(o => !o.disabled).map(o => o.value)`)
	}
	learners := func(kinds ...config.Kind) []string {
		var out []string
		for _, i := range trainer.Runnable() {
			ok := true
			for _, k := range kinds {
				ok = ok && slices.Contains(i.Kinds, string(k))
			}
			if ok {
				out = append(out, i.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	tick := func(name string, on bool) {
		b.exec(`(() => { const i = document.querySelector('input[name=schemas][value="` + name + `"]'); if (i.checked !== ` +
			map[bool]string{true: "true", false: "false"}[on] + `) i.click(); })()`)
	}

	// sentiment (radio) is ticked: every trainer that learns nominal schemas.
	if got, want := offered(), learners(config.KindNominal); !slices.Equal(got, want) {
		t.Errorf("with sentiment ticked the menu offers %q, want %q", got, want)
	}
	tick("mood", true)
	got, want := offered(), learners(config.KindNominal, config.KindOrdinal)
	if !slices.Equal(got, want) || !slices.Contains(got, "embed-logreg") || slices.Contains(got, "tfidf-logreg") && !slices.Contains(trainer.Trainers["tfidf-logreg"].Kinds, "ordinal") {
		t.Errorf("with sentiment and mood (likert) ticked the menu offers %q, want %q", got, want)
	}
	if sel := b.text("document.getElementById('trainer').value"); !slices.Contains(want, sel) {
		t.Errorf("the selected trainer %q does not learn the ticked schemas", sel)
	}
	if b.text("String(document.getElementById('trainer-note').hidden)") != "true" {
		t.Error("a note shows while a trainer fits")
	}
	tick("notes", true)
	if got := offered(); len(got) != 0 {
		t.Errorf("with a text schema ticked the menu offers %q", got)
	}
	note := b.text("document.getElementById('trainer-note').textContent")
	if note != "No trainer of this version learns other schemas: untick them, or train them with an exec: program of your own (potato-dispatch run --trainer exec:PROGRAM)." {
		t.Errorf("the note says %q", note)
	}
	if b.text("String(document.getElementById('start-run').disabled)") != "true" {
		t.Error("the start button is on with no trainer that fits")
	}
	tick("notes", false)
	tick("mood", false)
	if got, want := offered(), learners(config.KindNominal); !slices.Equal(got, want) || b.text("String(document.getElementById('start-run').disabled)") != "false" {
		t.Errorf("unticked again, the menu offers %q (want %q) and the start button is off: %s", got, want,
			b.text("String(document.getElementById('start-run').disabled)"))
	}
}

package dispatch

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"potato-training/lib/rundir"
)

// bytePhases are the progress phases that count bytes: the copies of a
// bundle or a model between machines.
var bytePhases = map[string]bool{"fetch": true, "upload": true, "download": true, "transfer": true, "copy": true}

// active is the run's progress while it means something: a phase under
// way, not one that ended (or stopped early) before the next step.
func active(r rundir.Record) *rundir.Progress {
	p := r.Progress
	if p == nil || rundir.Finished(r.State) || p.Total <= 0 || p.Current >= p.Total {
		return nil
	}
	if r.State != rundir.StateRunning && !bytePhases[p.Phase] {
		return nil
	}
	return p
}

// eta is the time left by the trainer's eta_s, counted from when the
// dispatch wrote it; -1 when the trainer gave none.
func eta(p *rundir.Progress, now time.Time) time.Duration {
	if p.EtaS <= 0 {
		return -1
	}
	d := time.Duration(p.EtaS * float64(time.Second))
	if p.At != nil {
		d -= now.Sub(*p.At)
	}
	return max(d, 0)
}

// FormatDuration writes a duration as people read one: 45s, 3m07s, 2h05m.
func FormatDuration(d time.Duration) string {
	s := int64(math.Round(d.Seconds()))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
}

func percent(p *rundir.Progress) string {
	pc := 100 * p.Current / p.Total
	if pc < 10 {
		return fmt.Sprintf("%.1f%%", math.Floor(pc*10)/10)
	}
	return fmt.Sprintf("%.0f%%", math.Floor(pc))
}

// formatBytes is a size in B, kB, MB or GB (powers of 1000, as the ssh
// backend's step line).
func formatBytes(n float64) string {
	switch {
	case n < 1e3:
		return fmt.Sprintf("%.0f B", n)
	case n < 1e6:
		return fmt.Sprintf("%.1f kB", n/1e3)
	case n < 1e9:
		return fmt.Sprintf("%.1f MB", n/1e6)
	}
	return fmt.Sprintf("%.2f GB", n/1e9)
}

func formatCount(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// amount is "49994/150000", or "12.3 MB of 29.0 MB" for a byte phase.
func amount(p *rundir.Progress) string {
	if bytePhases[p.Phase] {
		return formatBytes(p.Current) + " of " + formatBytes(p.Total)
	}
	return formatCount(p.Current) + "/" + formatCount(p.Total)
}

// ProgressText is a run's progress as status shows it: "fit 33%, ETA
// 1m10s (49994/150000)"; "" when the run has no phase under way.
func ProgressText(r rundir.Record, now time.Time) string {
	p := active(r)
	if p == nil {
		return ""
	}
	s := p.Phase + " " + percent(p)
	if d := eta(p, now); d >= 0 {
		s += ", ETA " + FormatDuration(d)
	}
	return s + " (" + amount(p) + ")"
}

// meter keeps what the terminal line needs between two reads of run.json:
// the samples its rate is measured on.
type meter struct {
	phase   string
	samples []sample
}

type sample struct {
	at  time.Time
	cur float64
}

// rateWindow is how far back the rate of the terminal line looks.
const rateWindow = 10 * time.Second

// observe adds a reading and returns the rate per second over the last
// rateWindow, or -1 while there is too little to tell.
func (m *meter) observe(p *rundir.Progress, now time.Time) float64 {
	at := now
	if p.At != nil {
		at = *p.At
	}
	if p.Phase != m.phase {
		m.phase, m.samples = p.Phase, nil
	}
	if n := len(m.samples); n == 0 || m.samples[n-1].cur != p.Current {
		if n > 0 && p.Current < m.samples[n-1].cur {
			m.samples = nil // the phase started again (another schema)
		}
		m.samples = append(m.samples, sample{at, p.Current})
	}
	for len(m.samples) > 2 && at.Sub(m.samples[1].at) > rateWindow {
		m.samples = m.samples[1:]
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if len(m.samples) < 2 || dt <= 0 {
		return -1
	}
	return (last.cur - first.cur) / dt
}

func formatRate(r float64, bytes bool) string {
	if bytes {
		return formatBytes(r) + "/s"
	}
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM it/s", r/1e6)
	case r >= 1e4:
		return fmt.Sprintf("%.1fk it/s", r/1e3)
	case r >= 100:
		return fmt.Sprintf("%.0f it/s", r)
	}
	return fmt.Sprintf("%.2g it/s", r)
}

// line is the terminal line of a run: the time since it was started, then
// its phase, percent, amount, rate and ETA; or its step line while no
// phase is under way.
func (m *meter) line(r rundir.Record, now time.Time) string {
	since := r.CreatedAt
	if r.StartedAt != nil {
		since = *r.StartedAt
	}
	elapsed := formatClock(now.Sub(since))
	p := active(r)
	if p == nil {
		step := r.Step
		if step == "" {
			step = r.State
		}
		return elapsed + "  " + strings.ReplaceAll(step, "\n", " ")
	}
	rate := m.observe(p, now)
	parts := []string{elapsed, p.Phase, percent(p), amount(p)}
	if rate > 0 {
		parts = append(parts, formatRate(rate, bytePhases[p.Phase]))
	}
	left := eta(p, now)
	if left < 0 && rate > 0 {
		left = time.Duration((p.Total - p.Current) / rate * float64(time.Second))
	}
	if left >= 0 {
		parts = append(parts, "ETA "+FormatDuration(left))
	}
	return strings.Join(parts, "  ")
}

// formatClock is an elapsed time as M:SS or H:MM:SS.
func formatClock(d time.Duration) string {
	s := max(int64(d.Seconds()), 0)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s%3600/60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// IsTerminal reports whether f is a terminal that can show an updating
// line: a tty, and TERM not "dumb".
func IsTerminal(f *os.File) bool {
	if os.Getenv("TERM") == "dumb" {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), ioctlGetTermios, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

// termWidth is the terminal's width in columns, 80 when it cannot tell.
func termWidth(f *os.File) int {
	var ws struct{ Row, Col, X, Y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws)))
	if errno != 0 || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}

// progressEvery is how often the terminal line is redrawn.
const progressEvery = 200 * time.Millisecond

// ShowProgress draws run id's progress on the terminal tty as one line,
// rewritten in place (carriage return, erase to the end of the line),
// from run.json, until the returned stop is called; stop erases the line,
// so that what is printed next starts on a clean one. Call it only for a
// terminal (IsTerminal). prefix starts the line: the program's name.
func ShowProgress(root *rundir.Root, id string, tty *os.File, prefix string) (stop func()) {
	return showProgress(root, id, tty, prefix, func() int { return termWidth(tty) })
}

func showProgress(root *rundir.Root, id string, w io.Writer, prefix string, width func() int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m meter
		drawn := ""
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			if info, err := root.Read(id); err == nil {
				line := prefix + m.line(info.Record, time.Now())
				if n := width() - 1; len([]rune(line)) > n && n > 0 {
					line = string([]rune(line)[:n])
				}
				if line != drawn {
					drawn = line
					fmt.Fprint(w, "\r"+line+"\x1b[K")
				}
			}
			select {
			case <-ctx.Done():
				if drawn != "" {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
}

// OpenRoot opens the training directory of the config at path, for
// ShowProgress.
func OpenRoot(configPath string) (*rundir.Root, error) {
	cfg, err := LoadConfig(configPath)
	if err != nil {
		return nil, err
	}
	return Root(cfg)
}

package slurmshim

import (
	"fmt"
	"time"
)

// timeStamp is how SLURM writes a point in time: local time, to the second.
const timeStamp = "2006-01-02T15:04:05"

func stamp(t time.Time) string {
	if t.IsZero() {
		return "Unknown"
	}
	return t.Format(timeStamp)
}

// squeueDuration is squeue's form (%M, %l): days and hours only as needed.
func squeueDuration(secs int64) string {
	if secs < 0 {
		return "INVALID"
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	switch {
	case d > 0:
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	case h > 0:
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}

// scontrolDuration is scontrol's form (RunTime, TimeLimit): HH:MM:SS or D-HH:MM:SS.
func scontrolDuration(secs int64) string {
	if secs < 0 {
		secs = 0
	}
	d, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	if d > 0 {
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	}
	return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
}

// runSecs is how long a job has run (so far, or in all).
func (j *job) runSecs(now time.Time) int64 {
	if j.StartTime.IsZero() {
		return 0
	}
	end := now
	if !j.EndTime.IsZero() {
		end = j.EndTime
	}
	return int64(end.Sub(j.StartTime) / time.Second)
}

func (j *job) limitString(squeue bool) string {
	if j.TimeLimitS == 0 {
		return "UNLIMITED"
	}
	if squeue {
		return squeueDuration(j.TimeLimitS)
	}
	return scontrolDuration(j.TimeLimitS)
}

// endEstimate is the job's end, or its expected end while it runs under a limit.
func (j *job) endEstimate() time.Time {
	if !j.EndTime.IsZero() || j.StartTime.IsZero() || j.TimeLimitS == 0 {
		return j.EndTime
	}
	return j.StartTime.Add(time.Duration(j.TimeLimitS) * time.Second)
}

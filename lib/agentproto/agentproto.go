// Package agentproto implements agent protocol v1, the HTTP+JSON protocol
// between a run's dispatch (or potato-server) and the agent on the training
// machine, described in potato-agent(1).
package agentproto

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"potato-training/lib/trainer"
)

// PathPrefix is the root of every route of the protocol.
const PathPrefix = "/api/training/agent/v1"

// Limits and defaults of the protocol (SPEC S10, S11, G7).
const (
	// DefaultLongPoll is how long a claim waits for a run before a 204.
	DefaultLongPoll = 25 * time.Second
	// DefaultMaxPredictionsMB bounds an uploaded predictions file.
	DefaultMaxPredictionsMB = 512
	// DefaultGraceSeconds is the time between SIGTERM and SIGKILL when a
	// job or a cancel reply does not say.
	DefaultGraceSeconds = 20
	// DefaultHeartbeatTimeoutS is how long the server waits for word from
	// the agent before it fails the run.
	DefaultHeartbeatTimeoutS = 120
	// MaxEventsBody bounds one POST of events; the client splits longer
	// batches.
	MaxEventsBody = 8 << 20
	// BundleAttempts is how many requests DownloadBundle makes in all.
	BundleAttempts = 5
	// MaxSocketPath is the longest unix socket path the kernel accepts
	// (sun_path is 108 bytes, NUL included).
	MaxSocketPath = 107
	// maxJSONBody bounds the small JSON bodies (claim, result).
	maxJSONBody = 1 << 20
)

// Claim is the server's answer to a claim: the run the agent is to train.
type Claim struct {
	RunID             string       `json:"run_id"`
	RunToken          string       `json:"run_token"`
	Spec              trainer.Spec `json:"spec"`
	GraceSeconds      int          `json:"grace_seconds"`
	HeartbeatTimeoutS int          `json:"heartbeat_timeout_s"`
	MaxPredictionsMB  int          `json:"max_predictions_mb"`
	Bundle            BundleInfo   `json:"bundle"`
}

// BundleInfo is what the agent checks a downloaded bundle against.
type BundleInfo struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ClaimRequest is the body of a claim: who asks.
type ClaimRequest struct {
	Backend string `json:"backend"`
	Host    string `json:"host"`
	Workdir string `json:"workdir"`
	Version string `json:"version"`
}

// Reply is the server's answer to a POST of events or a heartbeat.
type Reply struct {
	Cancel       bool `json:"cancel"`
	GraceSeconds int  `json:"grace_seconds,omitempty"`
}

// Result is how a run ended on the agent's side. Code says why a job did
// not end as its training process's exit status says, and Error says it
// in words for the run log: both are set, or neither. Consumers decide
// on Code (and Signal), never on Error's text.
type Result struct {
	ExitCode    int    `json:"exit_code"`
	ArtifactURI string `json:"artifact_uri"`
	Error       string `json:"error"`
	Code        string `json:"code,omitempty"`
	// Signal is the number of the signal that killed the training
	// process, whether or not the agent had asked it to stop; 0 when none
	// did.
	Signal int `json:"signal,omitempty"`
}

// StatusError is an error a Run returns to answer with a given HTTP
// status; Msg is the body's "error".
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string { return e.Msg }

// HTTPError is a non-2xx answer as the client sees it; Msg is the "error"
// of the body, or the start of a body that is not JSON.
type HTTPError struct {
	Code int
	Msg  string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("the server answered %d %s", e.Code, http.StatusText(e.Code))
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is makes errors.Is(err, ErrTooLarge) true for a 413.
func (e *HTTPError) Is(target error) bool {
	return target == ErrTooLarge && e.Code == http.StatusRequestEntityTooLarge
}

// ErrTooLarge is matched (errors.Is) by the error of an upload the server
// refused with 413; that error's message gives the server's limit.
var ErrTooLarge = errors.New("too large for the server")

// errorBody is the body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

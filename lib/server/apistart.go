// POST /runs: a run started as potato-dispatch run --detach, its arguments built from the request and checked, the child's answer turned into the API's.

package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/rundir"
	"potato-training/lib/trainer/calibrate"
)

// startRequest is the body of POST /runs.
type startRequest struct {
	Trainer string            `json:"trainer"`
	Schemas []string          `json:"schemas"`
	Backend string            `json:"backend"`
	Params  map[string]string `json:"params"`
}

// startRun starts a run with potato-dispatch run --detach, which records
// it, prints its id and leaves it to a dispatch in a session of its own:
// the run is not the server's child and outlives it.
func (a *api) startRun(w http.ResponseWriter, r *http.Request) {
	req, err := decodeStart(w, r)
	if err != nil {
		a.fail(w, err)
		return
	}
	args, err := a.runArgs(req)
	if err != nil {
		a.fail(w, err)
		return
	}
	id, err := a.dispatch(r.Context(), args)
	if err != nil {
		a.fail(w, err)
		return
	}
	a.s.logf("run %s started through the API: trainer %s, schemas %s", id, req.Trainer, strings.Join(req.Schemas, ","))
	w.Header().Set("Location", apiPrefix+"/runs/"+id)
	agentproto.WriteJSON(w, http.StatusCreated, map[string]string{"run_id": id})
}

func decodeStart(w http.ResponseWriter, r *http.Request) (*startRequest, error) {
	if r.ContentLength > maxBody { // refused unread
		return nil, errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	var req startRequest
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody)
		}
		return nil, errorf(http.StatusBadRequest, "the body is not a run request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf(http.StatusBadRequest, "the body holds more than one JSON value")
	}
	return &req, nil
}

// runArgs checks a request against the config and turns it into
// potato-dispatch's arguments. Every value goes in its own --flag=VALUE
// argument, so none can be taken for a flag.
func (a *api) runArgs(req *startRequest) ([]string, error) {
	cfg := a.s.Config
	if req.Backend != "" {
		if _, ok := cfg.Backend(req.Backend); !ok {
			return nil, errorf(http.StatusConflict, msgNoBackend, req.Backend, strings.Join(cfg.BackendNames(), ", "))
		}
	}
	switch {
	case req.Trainer == "":
		return nil, errorf(http.StatusBadRequest, "no trainer given: for example \"trainer\": \"tfidf-logreg\"")
	case strings.HasPrefix(req.Trainer, "exec:"):
		return nil, errorf(http.StatusBadRequest, msgExecTrainer, req.Trainer)
	case strings.HasPrefix(req.Trainer, "-") || !printable(req.Trainer) || len(req.Trainer) > 200:
		return nil, errorf(http.StatusBadRequest, "unknown trainer %q", req.Trainer)
	case len(req.Schemas) == 0:
		return nil, errorf(http.StatusBadRequest, "no schema given: for example \"schemas\": [\"sentiment\"]")
	case len(req.Params) > maxParams:
		return nil, errorf(http.StatusBadRequest, "more than %d params", maxParams)
	}
	for _, name := range req.Schemas {
		if _, ok := cfg.Scheme(name); !ok || strings.Contains(name, ",") {
			return nil, errorf(http.StatusBadRequest, "schema %q is not in annotation_schemes of the config", name)
		}
	}
	args := []string{"run", a.s.ConfigPath, "--trainer=" + req.Trainer, "--schemas=" + strings.Join(req.Schemas, ",")}
	if req.Backend != "" {
		args = append(args, "--backend="+req.Backend)
	}
	keys := make([]string, 0, len(req.Params))
	for k := range req.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := req.Params[k]
		if !paramKey.MatchString(k) {
			return nil, errorf(http.StatusBadRequest, "param %q: a name is letters, digits, \"_\", \".\" and \"-\", and does not start with \"-\" or \".\"", k)
		}
		if k == calibrate.ParamStore || k == calibrate.ParamProject {
			// decision-calibrate's store and project name the SQLite file it
			// reads: the local backend sets them to the project's own.
			return nil, errorf(http.StatusBadRequest, "param %q is the toolkit's own, set to the project's store; the API does not take it", k)
		}
		if strings.ContainsRune(v, 0) || len(v) > maxParamValue {
			return nil, errorf(http.StatusBadRequest, "param %q: the value holds a NUL byte or is over %d bytes", k, maxParamValue)
		}
		args = append(args, "--param="+k+"="+v)
	}
	return append(args, "--trigger=api", "--detach"), nil
}

func printable(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// dispatch runs potato-dispatch with args and returns the run id it
// prints. Its refusals (exit 2) become 400s carrying its message.
func (a *api) dispatch(ctx context.Context, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := command(ctx, a.s.Dispatch, args, &stdout, &stderr)
	err := cmd.Run()
	id := strings.TrimSpace(stdout.String())
	if err == nil && rundir.ValidID(id) {
		return id, nil
	}
	msg, hints := childMessage("potato-dispatch", stderr.String())
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", errorf(http.StatusInternalServerError, "potato-dispatch did not report a run id within %s", startTimeout)
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		return "", &apiError{code: http.StatusBadRequest, msg: msg, hints: hints}
	case err != nil && msg != "":
		return "", &apiError{code: http.StatusInternalServerError, msg: msg, hints: hints}
	case err != nil:
		return "", errorf(http.StatusInternalServerError, "running potato-dispatch: %v", err)
	}
	return "", errorf(http.StatusInternalServerError, "potato-dispatch printed no run id")
}

// command makes a child that does not share the server's session, so a
// signal to the server's terminal or process group never reaches it, and
// that is killed with its group when ctx ends.
func command(ctx context.Context, prog string, args []string, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// childMessage turns a child's "name: error:" and "name: hint:" lines
// into a message and hints.
func childMessage(name, stderr string) (string, []string) {
	var msg, hints []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		switch {
		case strings.HasPrefix(l, name+": hint: "):
			hints = append(hints, strings.TrimPrefix(l, name+": hint: "))
		case l != "":
			msg = append(msg, strings.TrimPrefix(l, name+": error: "))
		}
	}
	return strings.Join(msg, "\n"), hints
}

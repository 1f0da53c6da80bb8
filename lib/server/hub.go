package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"potato-training/lib/agentproto"
	"potato-training/lib/hub"
	"potato-training/lib/rundir"
)

// pushTimeout bounds potato-dispatch push, which sends a model of up to
// some gigabytes to the Hub.
const pushTimeout = time.Hour

// pushing holds the run directories a push is under way from: one push of
// a run at a time.
var pushing sync.Map

// hubModel is one schema's model a run can push, as GET .../hub shows it.
type hubModel struct {
	Schema string `json:"schema"`
	Kind   string `json:"kind"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	// BaseModel is the base model's id on the Hub, "" when the run named
	// a directory: the form then asks for it.
	BaseModel string `json:"base_model"`
}

// hubState is GET /runs/<id>/hub: whether the run's model can be pushed
// and why not, where the server's token comes from (never the token),
// and the pushes made.
type hubState struct {
	RunID    string       `json:"run_id"`
	Pushable bool         `json:"pushable"`
	Reason   string       `json:"reason,omitempty"`
	Models   []hubModel   `json:"models"`
	Token    string       `json:"token,omitempty"`
	NoToken  string       `json:"no_token,omitempty"`
	Pushes   []hub.Result `json:"pushes"`
}

// pushRequest is the body of POST /runs/<id>/hub.
type pushRequest struct {
	Repo      string `json:"repo"`
	Private   *bool  `json:"private"`
	Revision  string `json:"revision"`
	Schema    string `json:"schema"`
	BaseModel string `json:"base_model"`
}

// hub serves /runs/<id>/hub: GET its state, POST a push.
func (a *api) hub(w http.ResponseWriter, r *http.Request, parts []string) {
	id := parts[1]
	if !rundir.ValidID(id) {
		a.fail(w, errorf(http.StatusNotFound, "no run %q", id))
		return
	}
	if _, err := os.Stat(filepath.Join(a.s.Root.RunDir(id), rundir.RecordFile)); err != nil {
		a.fail(w, errorf(http.StatusNotFound, "no run %s", id))
		return
	}
	if r.Method == http.MethodPost {
		a.push(w, r, id)
		return
	}
	agentproto.WriteJSON(w, http.StatusOK, a.hubState(id))
}

func (a *api) hubState(id string) hubState {
	st := hubState{RunID: id, Models: []hubModel{}}
	var err error
	if st.Pushes, err = hub.Pushes(a.s.Root, id); err != nil {
		a.s.logf("run %s: %s: %v", id, hub.PushesFile, err)
	}
	info, err := a.s.Root.Read(id)
	if err != nil {
		st.Reason = err.Error()
		return st
	}
	for _, schema := range info.Schemas {
		m, err := hub.Find(a.s.Root, id, schema)
		if err != nil {
			if st.Reason == "" {
				st.Reason = err.Error()
			}
			continue
		}
		st.Models = append(st.Models, hubModel{Schema: schema, Kind: m.Kind, Files: len(m.Files) + 1, Bytes: m.Bytes(),
			BaseModel: m.BaseID(hub.CardOptions{})})
	}
	if len(info.Schemas) == 0 {
		st.Reason = "the run trained no schema"
	}
	st.Pushable = len(st.Models) > 0
	if st.Pushable {
		st.Reason = ""
	}
	if t, err := hub.FindToken("", os.Getenv); err == nil {
		st.Token = t.Source
	} else {
		st.NoToken = err.Error() + " (in potato-server's environment)"
	}
	return st
}

// push pushes the run's model with potato-dispatch push --json, the
// server's own token reaching it in the environment potato-server was
// started with ($HF_TOKEN, or the Hub's token file): the page never
// sees a token. What can be refused at once is refused before the push
// starts: a bad request (400), a run that cannot be pushed (409), no
// token (409).
func (a *api) push(w http.ResponseWriter, r *http.Request, id string) {
	var req pushRequest
	if r.ContentLength > maxBody {
		a.fail(w, errorf(http.StatusRequestEntityTooLarge, "the body is over %d bytes", maxBody))
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		a.fail(w, errorf(http.StatusBadRequest, "the body is not a push request: %v", err))
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		a.fail(w, errorf(http.StatusBadRequest, "the body holds more than one JSON value"))
		return
	}
	for _, err := range []error{hub.CheckRepo(req.Repo), hub.CheckRevision(req.Revision), hub.CheckBaseModel(req.BaseModel)} {
		if err != nil {
			a.fail(w, errorf(http.StatusBadRequest, "%v", err))
			return
		}
	}
	var nf *hub.NotPushable
	var ue *hub.UsageError
	switch _, err := hub.Find(a.s.Root, id, req.Schema); {
	case errors.As(err, &nf):
		a.fail(w, errorf(http.StatusConflict, "%v", err))
		return
	case errors.As(err, &ue):
		a.fail(w, errorf(http.StatusBadRequest, "%v", err))
		return
	case err != nil:
		a.fail(w, err)
		return
	}
	if _, err := hub.FindToken("", os.Getenv); err != nil {
		a.fail(w, &apiError{code: http.StatusConflict, msg: err.Error(),
			hints: []string{"the page pushes with potato-server's token: set HF_TOKEN in its environment, or write the Hub's token file with mode 0600, and start it again"}})
		return
	}
	dir := a.s.Root.RunDir(id)
	if _, busy := pushing.LoadOrStore(dir, true); busy {
		a.fail(w, errorf(http.StatusConflict, "a push of run %s is under way", id))
		return
	}
	defer pushing.Delete(dir)
	// Every value goes in its own --flag=VALUE argument, and "--" ends the
	// flags: none can be taken for another.
	args := []string{"push", "--json", "--repo=" + req.Repo}
	if req.Private != nil && !*req.Private {
		args = append(args, "--public")
	}
	for flag, v := range map[string]string{"--revision=": req.Revision, "--schema=": req.Schema, "--base-model=": req.BaseModel} {
		if v != "" {
			args = append(args, flag+v)
		}
	}
	args = append(args, "--", a.s.ConfigPath, id)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), pushTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := command(ctx, a.s.Dispatch, args, &stdout, &stderr).Run()
	var res hub.Result
	if err == nil && json.Unmarshal(stdout.Bytes(), &res) == nil && res.CommitOID != "" {
		a.s.logf("run %s: model of %s pushed to the Hub through the API: %s", id, res.Schema, res.CommitURL)
		agentproto.WriteJSON(w, http.StatusOK, res)
		return
	}
	msg, hints := childMessage("potato-dispatch", stderr.String())
	var ee *exec.ExitError
	code := http.StatusBadGateway // the Hub, or the way to it, refused
	switch {
	case ctx.Err() != nil:
		code, msg = http.StatusGatewayTimeout, fmt.Sprintf("potato-dispatch push did not finish within %s", pushTimeout)
	case errors.As(err, &ee) && ee.ExitCode() == 2:
		code = http.StatusBadRequest
	case msg == "" && err != nil:
		code, msg = http.StatusInternalServerError, fmt.Sprintf("potato-dispatch push: %v", err)
	case msg == "":
		code, msg = http.StatusInternalServerError, "potato-dispatch push printed no commit"
	}
	a.s.logf("run %s: a push to the Hub through the API failed: %s", id, msg)
	a.fail(w, &apiError{code: code, msg: msg, hints: hints})
}

package backend

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"potato-training/lib/check"
	"potato-training/lib/config"
)

// Descriptor is one backend type: each lib/backend/TYPE package registers
// its own in an init function, and asserts there that its backend
// implements Backend. The dispatch, potato-check, the validator, the
// server and potato-register ask the registry what a type does instead of
// naming types; lib/backend/all imports every type's package, and a
// package that reads the registry imports it too.
type Descriptor struct {
	// Name is the type, the value of an entry's type key.
	Name string
	// Keys are the keys an entry of this type accepts: lib/config's table
	// for it (config.KeysFor), which its decoder and potato-config(5)
	// read. The local backend has no entry, and no keys of its own: the
	// keys of model_training itself set it.
	Keys []config.Key
	// New makes the backend of a configured entry.
	New func(b *config.Backend) Backend
	// Check answers potato-check(1) for an entry: can a run start there
	// now, and where would it run.
	Check func(ctx context.Context, in check.Input) check.Report
	// Validate says what is wrong with an entry's values beyond their
	// types, which the decoder checked; path is
	// "model_training.backends.NAME". The local backend has no entry to
	// validate.
	Validate func(b *config.Backend, path string) []Finding
	// Label is the entry as the "Runs on" menu and run.json's ran_on show
	// it (SPEC A1): "gpu-server (ssh to gpu.example.org)".
	Label func(b *config.Backend) string
	// OnServer is set for the type whose training process runs on the
	// annotation server itself (local): only it runs the trainers that
	// read the server's own files.
	OnServer bool
	// Tokens is set for the type whose runs wait, queued, for an agent
	// that holds the backend's token (agent): potato-register issues the
	// token, and the server hands the runs out to the agents that show it.
	Tokens bool
	// ModelStays, when set, says why the model files of a run of this
	// type never come back to its run directory (agent); potato-dispatch
	// push tells it of a run it cannot publish.
	ModelStays string
}

// Finding is one thing wrong with an entry's value, for potato-validate.
type Finding struct {
	// Key is the entry's key it concerns ("time"); the finding's line is
	// that key's, or the entry's when the key is absent.
	Key string
	// Warning is set for a value that works but is likely a mistake.
	Warning bool
	// Message is the whole text, key path included.
	Message string
}

var registry struct {
	sync.RWMutex
	types []*Descriptor
}

// Register adds a backend type. It panics on a second type of the same
// name, or a descriptor without its name, constructor, check or label:
// a program that registers them that way is wrong from its start.
func Register(d Descriptor) {
	if d.Name == "" || d.New == nil || d.Check == nil || d.Label == nil {
		panic(fmt.Sprintf("backend: the descriptor of type %q lacks its name, constructor, check or label", d.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	for _, t := range registry.types {
		if t.Name == d.Name {
			panic("backend: type " + d.Name + " is registered twice")
		}
	}
	registry.types = append(registry.types, &d)
}

// Lookup is the registered type named typ.
func Lookup(typ string) (*Descriptor, bool) {
	registry.RLock()
	defer registry.RUnlock()
	for _, t := range registry.types {
		if t.Name == typ {
			return t, true
		}
	}
	return nil, false
}

// Types are the registered types, sorted by name.
func Types() []*Descriptor {
	registry.RLock()
	defer registry.RUnlock()
	out := slices.Clone(registry.types)
	slices.SortFunc(out, func(a, b *Descriptor) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Of is the type of a configured backend. The config accepts no type that
// is not registered, so one that is missing is a program that does not
// import lib/backend/all, and Of panics.
func Of(b *config.Backend) *Descriptor {
	d, ok := Lookup(b.Type)
	if !ok {
		panic(fmt.Sprintf("backend: type %q of backend %s is not registered (import potato-training/lib/backend/all)", b.Type, b.Name))
	}
	return d
}

// Label is b as the "Runs on" menu and run.json's ran_on show it.
func Label(b *config.Backend) string {
	return Of(b).Label(b)
}

// Check answers potato-check(1) for in.Backend with its type's check.
func Check(ctx context.Context, in check.Input) check.Report {
	b := in.Backend
	d, ok := Lookup(b.Type)
	if !ok {
		msg := fmt.Sprintf("checking %s backends is not available in this version", b.Type)
		return check.Report{Backend: b.Name, Type: b.Type, Summary: b.Name + ": " + msg,
			GPUs: []check.GPUInfo{}, Warnings: []string{}, Problems: []string{msg}, Notes: []string{}}
	}
	if in.Now.IsZero() {
		in.Now = time.Now()
	}
	r := d.Check(ctx, in)
	r.Notes = []string{}
	return r
}

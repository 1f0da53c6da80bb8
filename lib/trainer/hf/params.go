package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ParamsFile is the trainer's parameter table, by its path under the
// tree's top: the one declaration of its parameters. The Python package
// reads it beside its modules (spec.py), so that it travels with them to
// every backend's far side; the registry reads it through Params.
const ParamsFile = "potato_hf/params.json"

// Param is a row of ParamsFile. Default is a --param value ("" when the
// trainer chooses, which DefaultNote says); Min and Max bound an int or
// float (nil for no bound), MinOpen and MaxOpen leave the bound itself
// out; Choices are a str parameter's only values.
type Param struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Default     string   `json:"default"`
	DefaultNote string   `json:"default_note"`
	Min         *float64 `json:"min"`
	Max         *float64 `json:"max"`
	MinOpen     bool     `json:"min_open"`
	MaxOpen     bool     `json:"max_open"`
	Choices     []string `json:"choices"`
	Help        string   `json:"help"`
}

// Params returns ParamsFile's rows, in its order (the order the help
// lists them). The file is embedded, so a table that does not decode is
// a build of the toolkit that cannot work: it panics.
func Params() []Param {
	var out []Param
	dec := json.NewDecoder(bytes.NewReader(files[ParamsFile]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		panic(fmt.Sprintf("hf: %s: %v", ParamsFile, err))
	}
	return out
}

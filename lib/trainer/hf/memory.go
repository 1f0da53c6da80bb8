package hf

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Shape is what the memory estimate needs of a decoder (Llama family),
// from its config.json or a GGUF file's metadata.
type Shape struct {
	ModelType                                                    string
	Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim, Vocab int
	// License is what the GGUF metadata's general.license says ("" when
	// nothing; a directory's is in its README.md, which the run reads).
	License string
}

// The constants of potato_hf/memory.py; TestLLMEstimateAgrees compares the
// two estimates.
const (
	bits4bit        = 4.127
	trainableBytes  = 20
	actHidden       = 16
	actInter        = 7
	ckptHidden      = 4
	ckptLayers      = 2
	cpuOverheadMiB  = 30
	cudaContextMiB  = 600
	allocatorSlack  = 1.10
	mib             = float64(1 << 20)
	defaultLLMBatch = 8
)

// Estimate is the memory a LoRA fit needs, in MiB, by part.
type Estimate struct {
	Weights, Trainable, Activations, Overhead, Total float64
	Params                                           int64
}

// String says it as the run log does.
func (e Estimate) String() string {
	what := "allocator"
	if e.Overhead > cpuOverheadMiB {
		what = "CUDA context and allocator"
	}
	return fmt.Sprintf("%.0f MiB (weights %.0f, adapter with its gradients and optimizer state %.0f, activations %.0f, %s %.0f)",
		e.Total, e.Weights, e.Trainable, e.Activations, what, e.Overhead)
}

// CountParams is the decoder's parameters without an LM head.
func (s Shape) CountParams() int64 {
	h, i, l := int64(s.Hidden), int64(s.Intermediate), int64(s.Layers)
	q := int64(s.Heads * s.HeadDim)
	kv := int64(s.KVHeads * s.HeadDim)
	layer := h*q + 2*h*kv + q*h + 3*h*i + 2*h
	return int64(s.Vocab)*h + l*layer + h
}

func (s Shape) loraParams(targets []string, r int) int64 {
	h, i := s.Hidden, s.Intermediate
	q, kv := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	dims := map[string][2]int{"q_proj": {h, q}, "k_proj": {h, kv}, "v_proj": {h, kv}, "o_proj": {q, h},
		"gate_proj": {h, i}, "up_proj": {h, i}, "down_proj": {i, h}}
	var per int64
	for _, t := range targets {
		d, ok := dims[t]
		if !ok {
			d = [2]int{h, h}
		}
		per += int64(r * (d[0] + d[1]))
	}
	return int64(s.Layers) * per
}

// EstimateMemory is potato_hf/memory.py's estimate: the weights as
// quantize stores them, the adapter and head with their gradients and
// AdamW's state, the activations of batch items of length tokens, and on
// a CUDA device its context and the allocator's slack.
func EstimateMemory(s Shape, quantize string, loraR int, targets []string, nLabels, batch, length int, checkpointing bool, deviceType, precision string) Estimate {
	n := s.CountParams()
	embed := float64(s.Vocab * s.Hidden)
	compute := 4.0
	if precision != "fp32" {
		compute = 2
	}
	var weights float64
	switch quantize {
	case "4bit":
		weights = (float64(n)-embed)*bits4bit/8 + embed*compute
	case "8bit":
		weights = (float64(n)-embed)*(1+4.0/float64(s.Hidden)) + embed*compute
	default:
		weights = float64(n) * compute
	}
	trainable := float64(s.loraParams(targets, loraR)+int64(s.Hidden*nLabels)) * trainableBytes
	tokens := float64(batch * length)
	perLayer := float64(actHidden*s.Hidden + actInter*s.Intermediate)
	var act float64
	if checkpointing {
		act = tokens * (float64(s.Layers*s.Hidden*ckptHidden) + perLayer*ckptLayers)
	} else {
		act = tokens * float64(s.Layers) * perLayer
	}
	e := Estimate{Weights: weights / mib, Trainable: trainable / mib, Activations: act * compute / mib, Params: n}
	body := e.Weights + e.Trainable + e.Activations
	e.Overhead = cpuOverheadMiB
	if deviceType == "cuda" {
		e.Overhead = body*(allocatorSlack-1) + cudaContextMiB
	}
	e.Total = body + e.Overhead
	return e
}

// LLMEstimate is the estimate of a run of hf-llm-classification with
// params on a device of type deviceType, from the model's shape; its
// defaults are the trainer's (batch 8, max_length 256 on a GPU and 128 on
// the CPU, checkpointing on a GPU, q_proj and v_proj, rank 8, bf16 on a
// GPU).
func LLMEstimate(s Shape, params map[string]string, nLabels int, deviceType string) Estimate {
	atoi := func(k string, d int) int {
		var x int
		if _, err := fmt.Sscan(params[k], &x); err == nil && x > 0 {
			return x
		}
		return d
	}
	length := 128
	if deviceType == "cuda" {
		length = 256
	}
	ckpt := deviceType == "cuda"
	switch strings.ToLower(params["gradient_checkpointing"]) {
	case "1", "true", "yes", "on":
		ckpt = true
	case "0", "false", "no", "off":
		ckpt = false
	}
	targets := []string{"q_proj", "v_proj"}
	if t := params["target_modules"]; t != "" {
		targets = strings.Split(t, ",")
	}
	precision := "fp32"
	if deviceType == "cuda" {
		precision = "bf16"
	}
	q := params["quantize"]
	if q == "" {
		q = "none"
	}
	return EstimateMemory(s, q, atoi("lora_r", 8), targets, nLabels, atoi("batch_size", defaultLLMBatch),
		atoi("max_length", length), ckpt, deviceType, precision)
}

// ModelShape reads the shape of model as the trainer would find it on
// this machine: a .gguf file, a directory with config.json or one .gguf
// file, a directory under POTATO_MODEL_CACHE, or a hub name's newest
// snapshot in the cache (HF_HUB_CACHE, HF_HOME/hub or
// ~/.cache/huggingface/hub). getenv reads the environment.
func ModelShape(model string, getenv func(string) string) (Shape, error) {
	if strings.HasSuffix(model, ".gguf") {
		if st, err := os.Stat(model); err == nil && !st.IsDir() {
			return ShapeFromGGUF(model)
		}
	}
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		cfg := filepath.Join(model, "config.json")
		if _, err := os.Stat(cfg); err == nil {
			return ShapeFromConfig(cfg)
		}
		ggufs, _ := filepath.Glob(filepath.Join(model, "*.gguf"))
		if len(ggufs) == 1 {
			return ShapeFromGGUF(ggufs[0])
		}
		return Shape{}, fmt.Errorf("%s holds no config.json and %d GGUF files", model, len(ggufs))
	}
	if c := getenv("POTATO_MODEL_CACHE"); c != "" {
		if st, err := os.Stat(filepath.Join(c, model)); err == nil && st.IsDir() {
			return ModelShape(filepath.Join(c, model), getenv)
		}
	}
	hub := getenv("HF_HUB_CACHE")
	if hub == "" {
		home := getenv("HF_HOME")
		if home == "" {
			base := getenv("XDG_CACHE_HOME")
			if base == "" {
				base = filepath.Join(getenv("HOME"), ".cache")
			}
			home = filepath.Join(base, "huggingface")
		}
		hub = filepath.Join(home, "hub")
	}
	snaps, _ := filepath.Glob(filepath.Join(hub, "models--"+strings.ReplaceAll(model, "/", "--"), "snapshots", "*", "config.json"))
	if len(snaps) == 0 {
		return Shape{}, fmt.Errorf("model %s is not a directory or file here, nor in the cache %s", model, hub)
	}
	sort.Slice(snaps, func(i, j int) bool { return mtime(snaps[i]) > mtime(snaps[j]) })
	return ShapeFromConfig(snaps[0])
}

func mtime(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

// ShapeFromConfig reads a config.json.
func ShapeFromConfig(path string) (Shape, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Shape{}, err
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		return Shape{}, fmt.Errorf("%s: %w", path, err)
	}
	num := func(keys ...string) int {
		for _, k := range keys {
			if f, ok := c[k].(float64); ok && f > 0 {
				return int(f)
			}
		}
		return 0
	}
	s := Shape{Hidden: num("hidden_size", "n_embd"), Layers: num("num_hidden_layers", "n_layer"),
		Heads: num("num_attention_heads", "n_head"), Vocab: num("vocab_size")}
	s.ModelType, _ = c["model_type"].(string)
	if s.Heads == 0 {
		s.Heads = 1
	}
	if s.Intermediate = num("intermediate_size"); s.Intermediate == 0 {
		s.Intermediate = 4 * s.Hidden
	}
	if s.KVHeads = num("num_key_value_heads"); s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	if s.HeadDim = num("head_dim"); s.HeadDim == 0 {
		s.HeadDim = s.Hidden / s.Heads
	}
	return s, nil
}

// ShapeFromGGUF reads a GGUF file's metadata (version 2 or 3): its
// architecture's embedding_length, feed_forward_length, block_count,
// attention.head_count(_kv), the tokenizer's token count and
// general.license.
func ShapeFromGGUF(path string) (Shape, error) {
	f, err := os.Open(path)
	if err != nil {
		return Shape{}, err
	}
	defer f.Close()
	kv, err := ggufMetadata(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return Shape{}, fmt.Errorf("%s: %w", path, err)
	}
	arch, _ := kv["general.architecture"].(string)
	if arch == "" {
		arch = "llama"
	}
	num := func(k string) int {
		if x, ok := kv[arch+"."+k].(uint64); ok {
			return int(x)
		}
		return 0
	}
	s := Shape{ModelType: arch, Hidden: num("embedding_length"), Intermediate: num("feed_forward_length"),
		Layers: num("block_count"), Heads: num("attention.head_count"), KVHeads: num("attention.head_count_kv")}
	if s.Heads == 0 {
		s.Heads = 1
	}
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	s.HeadDim = s.Hidden / s.Heads
	if n, ok := kv["tokenizer.ggml.tokens"].(uint64); ok {
		s.Vocab = int(n)
	}
	s.License, _ = kv["general.license"].(string)
	return s, nil
}

// ggufMetadata reads the key-value pairs of a GGUF header: integers as
// uint64 (negative ones are not needed here), strings as strings, an
// array as its length.
func ggufMetadata(r io.Reader) (map[string]any, error) {
	var hdr struct {
		Magic   [4]byte
		Version uint32
		Tensors uint64
		KVs     uint64
	}
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return nil, err
	}
	if string(hdr.Magic[:]) != "GGUF" || hdr.Version < 2 {
		return nil, errors.New("not a GGUF file of version 2 or later")
	}
	if hdr.KVs > 1<<20 {
		return nil, fmt.Errorf("%d metadata keys", hdr.KVs)
	}
	out := map[string]any{}
	for i := uint64(0); i < hdr.KVs; i++ {
		key, err := ggufString(r)
		if err != nil {
			return nil, err
		}
		var typ uint32
		if err := binary.Read(r, binary.LittleEndian, &typ); err != nil {
			return nil, err
		}
		v, err := ggufValue(r, typ)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out[key] = v
	}
	return out, nil
}

var ggufSizes = map[uint32]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

func ggufValue(r io.Reader, typ uint32) (any, error) {
	switch typ {
	case 8:
		return ggufString(r)
	case 9:
		var et uint32
		var n uint64
		if err := binary.Read(r, binary.LittleEndian, &et); err != nil {
			return nil, err
		}
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return nil, err
		}
		if et == 9 {
			return nil, errors.New("nested arrays")
		}
		if size, ok := ggufSizes[et]; ok {
			_, err := io.CopyN(io.Discard, r, int64(n)*int64(size))
			return n, err
		}
		for j := uint64(0); j < n; j++ {
			if _, err := ggufValue(r, et); err != nil {
				return nil, err
			}
		}
		return n, nil
	}
	size, ok := ggufSizes[typ]
	if !ok {
		return nil, fmt.Errorf("value type %d", typ)
	}
	b := make([]byte, 8)
	if _, err := io.ReadFull(r, b[:size]); err != nil {
		return nil, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func ggufString(r io.Reader) (string, error) {
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return "", err
	}
	if n > 1<<24 {
		return "", fmt.Errorf("a string of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return string(b), err
}

package config

import "strings"

// The key tables below are the single source of what each part of the
// model_training block accepts: the decoder, the validator and the key
// table of potato-config(5) are all made from them.

// Key describes one accepted key.
type Key struct {
	Name string
	// Default is the value used when the key is absent, written as YAML.
	// Empty means no default (the zero value, or nothing).
	Default  string
	Required bool
	Doc      string
}

// Backend types.
const (
	TypeLocal = "local"
	TypeSSH   = "ssh"
	TypeSLURM = "slurm"
	TypeAgent = "agent"
)

// DefaultRemoteDir is where an ssh backend keeps its code and jobs.
const DefaultRemoteDir = "~/.cache/potato-training"

// sshConnectionKeys are shared by the ssh and slurm types.
var sshConnectionKeys = []Key{
	{Name: "type", Required: true, Doc: "ssh, slurm or agent."},
	{Name: "description", Doc: "Free text shown beside the backend on the Training page."},
	{Name: "host", Required: true, Doc: "Any name ssh accepts, an alias of the ssh_config file included."},
	{Name: "user", Doc: "Login name, passed to ssh as -l."},
	{Name: "port", Doc: "Port, passed to ssh as -p."},
	{Name: "identity_file", Doc: "Private key, passed to ssh as -i; it must work without a prompt (or be held by ssh-agent)."},
	{Name: "ssh_config", Doc: "An ssh_config file passed to ssh as -F, for a service account's own settings."},
	{Name: "python", Default: "python3", Doc: "Interpreter on the host for the agent and for Python trainers (3.8 or newer)."},
}

// SSHKeys are the keys of a backend of type ssh.
var SSHKeys = append(append([]Key{}, sshConnectionKeys...),
	Key{Name: "packages", Doc: "Packages installed once into a virtual environment under remote_dir made with --system-site-packages."},
	Key{Name: "gpus", Default: "auto", Doc: "auto (the GPU with the most free memory), none (CPU), or GPU indices such as \"1\" or \"0,1\"."},
	Key{Name: "min_free_gpu_mb", Default: "2000", Doc: "With gpus: auto, a run starts only on a GPU with this much free memory."},
	Key{Name: "num_threads", Doc: "Sets OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS for the run."},
	Key{Name: "remote_dir", Default: DefaultRemoteDir, Doc: "Where the toolkit keeps its code, environment and job directories on the host; a relative path is taken from the remote user's home directory, as scp takes one."},
	Key{Name: "env", Doc: "Environment variables for the remote side, as a map (PATH included); their values reach the host on the connection's standard input, never on a command line."},
	Key{Name: "fetch_artifacts", Default: "true", Doc: "Copy the model files back into the run's artifacts/."},
	Key{Name: "keep_remote", Default: "false", Doc: "Keep the remote job directory after the run."},
	Key{Name: "max_artifact_mb", Default: "2048", Doc: "Files larger than this stay on the host and are named in the run log."},
	Key{Name: "max_fetch_mb", Default: "16384", Doc: "The copy of the model back stops, and the run fails, past this many MB in all, whatever the host says it sends."},
	Key{Name: "heartbeat_timeout_s", Default: "120", Doc: "A run whose agent sends nothing for this long fails."},
)

// SLURMKeys are the keys of a backend of type slurm: the ssh keys except
// gpus and packages, with remote_dir required, plus the scheduler's keys.
var SLURMKeys = append(slurmFromSSH(),
	Key{Name: "job_python", Doc: "Interpreter on the compute nodes for the training process; python when left out."},
	Key{Name: "partition", Doc: "sbatch --partition."},
	Key{Name: "gres", Doc: "sbatch --gres, e.g. gpu:1; without it the job gets no GPU."},
	Key{Name: "time", Doc: "sbatch --time, in any form sbatch accepts (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S)."},
	Key{Name: "account", Doc: "sbatch --account."},
	Key{Name: "qos", Doc: "sbatch --qos."},
	Key{Name: "cpus_per_task", Doc: "sbatch --cpus-per-task."},
	Key{Name: "mem", Doc: "sbatch --mem, e.g. 16G."},
	Key{Name: "constraint", Doc: "sbatch --constraint."},
	Key{Name: "prelude", Doc: "Lines run in job.sh before the training process (module loads, environment activation)."},
	Key{Name: "poll_interval_s", Default: "10", Doc: "How often the agent on the login node runs squeue."},
)

func slurmFromSSH() []Key {
	var out []Key
	for _, k := range SSHKeys {
		switch k.Name {
		case "gpus", "packages":
			continue
		case "remote_dir":
			k.Default = ""
			k.Required = true
			k.Doc = "Directory on storage the login and compute nodes share; never under /tmp or /var/tmp."
		}
		out = append(out, k)
	}
	return out
}

// AgentKeys are the keys of a backend of type agent.
var AgentKeys = []Key{
	{Name: "type", Required: true, Doc: "ssh, slurm or agent."},
	{Name: "description", Doc: "Free text shown beside the backend on the Training page."},
	{Name: "heartbeat_timeout_s", Default: "120", Doc: "A run whose agent sends nothing for this long fails."},
	{Name: "queue_timeout_s", Doc: "A queued run fails after this long without an agent; without it, it waits until cancelled."},
}

// BackendType is what an entry of model_training.backends of one type may
// say: the decoder, the validator and potato-config(5) read it. Each
// backend type's package in lib/backend names its table in its descriptor
// (the registry's test checks that the two agree); the tables stay here,
// with the Backend struct that holds their values, because the config
// file's format is this package's, and a program that links no backend
// (potato-validate's decoder, the login node's slurm.json) reads it the
// same.
type BackendType struct {
	Name string
	// Article is "a" or "an", as the type's name is read aloud.
	Article string
	Keys    []Key
	// NotAccepted explains keys the type refuses on purpose, beyond
	// "unknown".
	NotAccepted map[string]string
}

// BackendTypes are the types an entry of model_training.backends may have,
// in the order the manual presents them. The local backend is none of
// them: it always exists, and the keys of the block itself set it.
var BackendTypes = []BackendType{
	{Name: TypeSSH, Article: "an", Keys: SSHKeys},
	{Name: TypeSLURM, Article: "a", Keys: SLURMKeys, NotAccepted: map[string]string{
		"packages": "a virtual environment made on the login node may not work on the compute nodes; point job_python at an environment they have and put its activation in prelude",
		"gpus":     "GPUs come from gres and the scheduler sets CUDA_VISIBLE_DEVICES",
	}},
	{Name: TypeAgent, Article: "an", Keys: AgentKeys, NotAccepted: map[string]string{
		"host": "the agent opens every connection itself, so the server needs no host",
	}},
}

// backendType is the entry type named typ.
func backendType(typ string) (BackendType, bool) {
	for _, t := range BackendTypes {
		if t.Name == typ {
			return t, true
		}
	}
	return BackendType{}, false
}

// backendTypeNames names the entry types, "ssh, slurm or agent" with
// conj "or".
func backendTypeNames(conj string) string {
	var names []string
	for _, t := range BackendTypes {
		names = append(names, t.Name)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

// TrainingKeys are the keys of the model_training block itself.
var TrainingKeys = []Key{
	{Name: "enabled", Default: "false", Doc: "Turns model training on for the project."},
	{Name: "backend", Default: "local", Doc: "The backend runs go to unless they name another; local when left out."},
	{Name: "backends", Doc: "Named backends, each a map with a type key (ssh, slurm or agent)."},
	{Name: "max_wall_seconds", Doc: "Any run not finished this long after it started is stopped."},
	{Name: "max_ram_mb", Doc: "Address-space limit of a local training process."},
	{Name: "device", Default: "auto", Doc: "Device of a local run: auto (CUDA, then mps, then CPU), cpu, mps, cuda or cuda:N."},
	{Name: "num_threads", Doc: "Thread count of a local run (OMP, MKL and OpenBLAS variables)."},
	{Name: "python", Doc: "Interpreter of a local run's Python trainers (3.8 or newer): a path, taken from the config file's directory when relative, or a name looked up on PATH. Left out: POTATO_TRAINING_PYTHON when set, else python3 on PATH."},
	{Name: "grace_seconds", Default: "20", Doc: "Time between SIGTERM and SIGKILL when a run is cancelled."},
	{Name: "retain_runs", Default: "5", Doc: "Finished runs kept: the newest this many, and the newest this many successful ones; older runs are removed with their rows in Potato's store, except the newest success of each trainer and schema and runs whose prelabels are still cited (see potato-dispatch(1), RETENTION); 0 keeps all."},
	{Name: "split_seed", Default: "0", Doc: "Seed of the stable train/val/test split."},
	{Name: "splits", Doc: "Ordered map of split name to fraction; default train 0.7, val 0.15, test 0.15."},
	{Name: "aggregation", Default: "consensus", Doc: "How several annotators' labels of an item become its one training label: consensus, Potato's default, is Dawid-Skene (each annotator's reliability estimated by EM over the items of the data files, their votes weighed by it; majority when only one annotator has labelled anything); majority takes the value most annotators gave, the first annotator's (by folder name) on a tie. The same as Potato's own training, so a run trains on the same labels whichever side starts it; potato-validate says which one runs use."},
	{Name: "writeback", Doc: "Which predictions become prelabels (below)."},
	{Name: "auto_retrain", Doc: "Retraining as annotations arrive (below)."},
	{Name: "max_predictions_mb", Default: "512", Doc: "Largest predictions file an agent may upload."},
	{Name: "max_events_mb", Default: "128", Doc: "Most a run's training process may write into its run directory, in MB: its events in events.jsonl and its lines in run.log together, whatever the backend. Past it the dispatch drops its further events and lines, but for its result, its errors and the last value of each metric, and says so once in the run log; the run goes on. 0 turns the bound off (potato-validate warns); a negative value is an error."},
	{Name: "trusted_proxies", Doc: "Addresses or CIDR prefixes of the reverse proxies in front of potato-server: only their X-Forwarded-For and X-Forwarded-Proto are believed (see potato-server(1), BEHIND A REVERSE PROXY); none by default. potato-validate warns of a prefix wider than a private network (IPv4 shorter than /8, IPv6 shorter than /16 outside fc00::/7): every client in it could write its own address."},
	{Name: "allowed_hosts", Doc: "Host names, besides localhost, this machine's name and IP addresses, that potato-server answers the page and the API for: the names users and proxies reach it by; another Host is refused (421), so that DNS rebinding cannot reach the API."},
}

// WritebackKeys are the keys of model_training.writeback.
var WritebackKeys = []Key{
	{Name: "schemas", Doc: "Schemas whose predictions are written back as prelabels; none when left out."},
	{Name: "include_unlabeled", Default: "false", Doc: "Also predict on items nobody has labelled yet."},
	{Name: "min_confidence", Default: "0", Doc: "Predictions below this confidence (0 to 1) are not written back, nor, when it is above 0, those without a confidence."},
	{Name: "promote", Default: "if_better", Doc: "if_better: a schema's predictions are published unless the run's held-out macro-F1 (a likert schema's mean absolute error in scale points, lower being better: see SCHEMA KINDS) is below that of the run published now beyond noise (in at least 95% of a paired bootstrap's draws of the common test items), or, with margin set, unless it is below that run's plus margin, both scored on the same test items against today's labels; always: every successful run's are (the default of earlier versions); under either, a model that learnt nothing is not published (see potato-dispatch(1), PROMOTION)."},
	{Name: "margin", Doc: "With promote: if_better, a fixed gate instead of the paired bootstrap: how much higher (macro-F1, -1 to 1) the new run must score; 0 asks for at least as high, a negative margin lets a slightly worse run through. For a likert schema it is in scale points of mean absolute error: the new run's must be at most the published run's less margin. Unset, a run is held back only when it is worse beyond noise."},
}

// AutoRetrainKeys are the keys of model_training.auto_retrain.
var AutoRetrainKeys = []Key{
	{Name: "enabled", Default: "false", Doc: "Lets potato-dispatch auto start runs; while it is false, auto says so, even with --quiet, and exits 2."},
	{Name: "trainer", Doc: "Trainer of automatic runs; required when enabled."},
	{Name: "schemas", Doc: "Schemas of automatic runs; required when enabled."},
	{Name: "update_frequency", Default: "25", Doc: "New annotations needed since the last run."},
	{Name: "min_interval_s", Default: "600", Doc: "Least time between two automatic runs."},
	{Name: "params", Doc: "Trainer parameters of automatic runs, as a map; potato-check judges the trainer with them (hf-llm-classification: quantize on a CUDA GPU, and the memory estimate against the GPU's free memory)."},
	{Name: "backend", Doc: "Backend of automatic runs; model_training.backend when left out."},
}

// ValidationKeys are the keys of the top-level validation block.
var ValidationKeys = []Key{
	{Name: "acknowledge", Doc: "Warnings to accept: each entry is a case-sensitive substring (12 characters or more) of a warning's text; \"NAME: text\" limits it to backend NAME."},
}

// KeysFor returns the key table of a backend type, or nil for an unknown type.
func KeysFor(typ string) []Key {
	t, _ := backendType(typ)
	return t.Keys
}

func findKey(table []Key, name string) (Key, bool) {
	for _, k := range table {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

package trainer

import (
	"strconv"
	"strings"
)

// LaunchEnv is the one place where the device a backend chose becomes
// what a training process sees, on every backend (local, the agent an ssh
// run starts, a polling agent, a SLURM job). spec.Limits.Device holds the
// choice: "cuda:N" or "cuda:N,M" (GPUs by nvidia-smi's index), "cpu" or
// "" (no GPU); anything else ("cuda" where the scheduler already made the
// job's GPUs visible, "mps", "auto" that the trainer resolves) is passed
// on as it is.
//
// It rewrites spec.Limits.Device to the device as it is named inside the
// process's environment, so that the spec a trainer reads names a device
// that exists there: cuda:1 becomes cuda:0 once only GPU 1 is visible,
// several GPUs become "cuda", no choice becomes "cpu". It returns the
// variables to add after the parent's environment (Environ), so they win:
// CUDA_DEVICE_ORDER=PCI_BUS_ID (GPUs numbered as nvidia-smi numbers them)
// and CUDA_VISIBLE_DEVICES, empty on the CPU; POTATO_TRAINING_DEVICE, the
// device again; and the thread variables of spec.Limits.NumThreads.
func LaunchEnv(spec *Spec) []string {
	var env []string
	dev := spec.Limits.Device
	switch {
	case strings.HasPrefix(dev, "cuda:"):
		ids := strings.TrimPrefix(dev, "cuda:")
		env = append(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="+ids)
		spec.Limits.Device = "cuda:0"
		if strings.Contains(ids, ",") {
			spec.Limits.Device = "cuda"
		}
	case dev == "cpu", dev == "":
		env = append(env, "CUDA_VISIBLE_DEVICES=")
		spec.Limits.Device = "cpu"
	}
	env = append(env, "POTATO_TRAINING_DEVICE="+spec.Limits.Device)
	if n := spec.Limits.NumThreads; n > 0 {
		for _, k := range []string{"MKL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"} {
			env = append(env, k+"="+strconv.Itoa(n))
		}
	}
	return env
}

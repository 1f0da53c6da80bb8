// Package fakebin holds fakes of programs this machine lacks, for tests.
//
// NvidiaSMI stands in for the real nvidia-smi, because the machines the
// tests run on have no GPU: it answers the query lib/gpu makes with the
// GPUs a test gives it. The fakes are POSIX sh scripts written into a
// directory the test prepends to PATH, so a child process (potato-check,
// an agent) finds them as it would the real program.
package fakebin

import (
	"path/filepath"
	"strings"
	"testing"

	"potato-training/internal/testcli"
)

// NoComputeCapText is what a driver older than about 510 prints, with exit
// status 2, when asked for the compute_cap field.
const NoComputeCapText = `Field "compute_cap" is not a valid field to query.`

// NoDevicesText is what nvidia-smi prints, with exit status 6, on a machine
// whose driver finds no GPU.
const NoDevicesText = "No devices were found"

const endMarker = "POTATO_FAKE_NVIDIA_SMI_END"

// NvidiaSMI writes an executable nvidia-smi into dir and returns dir. gpus
// is the answer to
//
//	nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.free,utilization.gpu,compute_cap --format=csv,noheader,nounits
//
// one GPU a line with all seven fields, printed as given. A query that does
// not end in compute_cap gets each line without its last field, so the
// same text serves both queries. Empty gpus is a machine with no GPU: the
// fake prints NoDevicesText and exits 6. Arguments other than a
// --query-gpu query are refused with exit status 2.
func NvidiaSMI(t testing.TB, dir, gpus string) string {
	t.Helper()
	return write(t, dir, gpus, false)
}

// NvidiaSMIOldDriver is NvidiaSMI for a driver that predates the
// compute_cap field: a query naming it prints NoComputeCapText and exits 2,
// the six-field query is answered from gpus (still written with seven
// fields) as NvidiaSMI answers it.
func NvidiaSMIOldDriver(t testing.TB, dir, gpus string) string {
	t.Helper()
	return write(t, dir, gpus, true)
}

func write(t testing.TB, dir, gpus string, oldDriver bool) string {
	t.Helper()
	gpus = strings.TrimRight(gpus, "\n")
	for _, line := range strings.Split(gpus, "\n") {
		if line == endMarker {
			t.Fatalf("fakebin: a GPU line is %q", endMarker)
		}
	}
	old := "false"
	if oldDriver {
		old = "true"
	}
	// Only shell builtins: a test may set PATH to this directory alone.
	script := `#!/bin/sh
# nvidia-smi fake from potato-training's internal/fakebin.
query=
for arg in "$@"; do
	case $arg in
	--query-gpu=*) query=${arg#--query-gpu=} ;;
	--format=*) ;;
	*) echo "nvidia-smi (fake): unsupported argument: $arg" >&2; exit 2 ;;
	esac
done
if [ -z "$query" ]; then
	echo "nvidia-smi (fake): only --query-gpu=... is supported" >&2
	exit 2
fi
strip=true
case $query in
*,compute_cap)
	if ` + old + `; then
		echo '` + NoComputeCapText + `'
		exit 2
	fi
	strip=false ;;
esac
`
	if gpus == "" {
		script += "echo '" + NoDevicesText + "'\nexit 6\n"
	} else {
		script += `while IFS= read -r line; do
	if $strip; then
		line=${line%,*}
	fi
	printf '%s\n' "$line"
done <<'` + endMarker + `'
` + gpus + "\n" + endMarker + "\n"
	}
	path := filepath.Join(dir, "nvidia-smi")
	testcli.WriteExecutable(t, path, []byte(script))
	return dir
}
